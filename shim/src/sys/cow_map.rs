//! A map read on hot paths from any thread without a lock, written by copying (arc-swap):
//! for tables that are read on every kernel launch and written rarely (a kernel's first
//! launch, a graph's instantiation). Writers never wait for readers; a reader keeps the
//! snapshot it loaded until it is done with it.

use std::sync::{Arc, LazyLock};

use arc_swap::ArcSwap;
use rustc_hash::FxHashMap;

type Table<V> = FxHashMap<usize, Arc<V>>;
type Shared<V> = ArcSwap<Table<V>>;

/// Values by a handle's address (a CUDA handle as `usize`).
pub struct CowMap<V> {
    table: LazyLock<Shared<V>, fn() -> Shared<V>>,
}

fn empty<V>() -> Shared<V> {
    ArcSwap::from_pointee(Table::default())
}

impl<V> CowMap<V> {
    pub const fn new() -> CowMap<V> {
        CowMap { table: LazyLock::new(empty::<V>) }
    }

    pub fn get(&self, key: usize) -> Option<Arc<V>> {
        self.table.load().get(&key).cloned()
    }

    /// Sets `key`'s value (`None`: removes it).
    pub fn set(&self, key: usize, value: Option<Arc<V>>) {
        self.table.rcu(|table| {
            let mut table = Table::clone(table);
            match &value {
                Some(value) => table.insert(key, Arc::clone(value)),
                None => table.remove(&key),
            };
            table
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_set_replaced_and_removed_by_key() {
        let map = CowMap::new();
        assert!(map.get(1).is_none());
        map.set(1, Some(Arc::new("a")));
        map.set(2, Some(Arc::new("b")));
        map.set(1, Some(Arc::new("c")));
        assert_eq!(map.get(1).as_deref(), Some(&"c"));
        map.set(1, None);
        assert!(map.get(1).is_none());
        assert_eq!(map.get(2).as_deref(), Some(&"b"));
    }
}
