//! Whether the hooks apply policy (the process phase) and the per-thread re-entry guard.

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};

const NOT_INITIALISED: u8 = 0;
const ACTIVE: u8 = 1;
const DISABLED: u8 = 2;
const FORKED_AFTER_CUDA: u8 = 3;

static PHASE: AtomicU8 = AtomicU8::new(NOT_INITIALISED);

/// Hooks apply policy only after initialisation and when not disabled.
pub fn active() -> bool {
    PHASE.load(Ordering::Acquire) == ACTIVE
}

/// Disabled by GREENBOOST_DISABLE (routing then passes everything through).
pub fn disabled() -> bool {
    PHASE.load(Ordering::Acquire) == DISABLED
}

pub fn activate() {
    PHASE.store(ACTIVE, Ordering::Release);
}

pub fn disable() {
    PHASE.store(DISABLED, Ordering::Release);
}

/// In the child of a fork after CUDA use: hooks pass everything to the real functions.
pub fn step_aside_after_fork() {
    PHASE.store(FORKED_AFTER_CUDA, Ordering::Release);
}

thread_local! {
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Marks the current thread as inside a hook; nested hooks pass straight through.
pub struct ReentryGuard(());

impl ReentryGuard {
    pub fn enter() -> Option<ReentryGuard> {
        let entered = IN_HOOK.try_with(|flag| !flag.replace(true)).unwrap_or(false);
        // Built only when entered: a guard built and dropped for a nested call would
        // clear the outer hook's flag (`then_some` builds its argument eagerly).
        entered.then(|| ReentryGuard(()))
    }
}

impl Drop for ReentryGuard {
    fn drop(&mut self) {
        let _ = IN_HOOK.try_with(|flag| flag.set(false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_hooks_pass_through_until_the_outermost_guard_is_dropped() {
        let outer = ReentryGuard::enter().expect("outermost hook");
        assert!(ReentryGuard::enter().is_none());
        assert!(ReentryGuard::enter().is_none(), "a nested call cleared the outer hook's flag");
        drop(outer);
        let again = ReentryGuard::enter();
        assert!(again.is_some());
    }
}
