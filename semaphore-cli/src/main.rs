//! `semaphore`: numbered-slot semaphores with leases, from the command line.
//!
//! `semaphore serve` serves the HTTP API of the seed document (see the
//! README) over a SQLite file (the default), a PostgreSQL database or
//! memory.

mod api;
mod cli;
mod error;
mod metrics;
mod openapi;
mod serve;
mod wire;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("semaphore: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(71);
        }
    };
    match cli.command {
        cli::Command::Serve(args) => match runtime.block_on(serve::serve(args)) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("semaphore serve: {e}");
                std::process::ExitCode::from(e.exit_code())
            }
        },
    }
}
