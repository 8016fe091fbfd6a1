#[derive(clap::Args)]
pub struct DemoArgs {}
#[derive(clap::Args)]
pub struct WorkerArgs {}
pub fn demo(_: &DemoArgs) -> Result<std::process::ExitCode, String> { todo!() }
pub fn worker(_: &WorkerArgs) -> Result<std::process::ExitCode, String> { todo!() }
