//! The comparison benchmark harness (`sessionlog bench`): sessionlog against its peers.

/// Arguments of `sessionlog bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// A short run (under a minute), as CI's smoke test does.
    #[arg(long)]
    pub quick: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// Runs the benchmark harness.
pub fn run(args: &BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    Err(format!("the benchmark harness is not built yet ({args:?})").into())
}
