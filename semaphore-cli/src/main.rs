//! `semaphore`: numbered-slot semaphores with leases, from the command line.
//!
//! `semaphore serve` serves the HTTP API of the seed document (see the
//! README) over a SQLite file (the default), a PostgreSQL database or
//! memory.

mod accept;
mod api;
mod app;
mod auth;
mod body_deadline;
mod cli;
mod commands;
mod error;
mod exit;
mod extract;
mod force;
mod hosts;
mod idempotency;
mod listing;
mod metrics;
mod openapi;
mod page;
mod parse_errors;
mod run;
mod serve;
mod shown;
mod single_headers;
mod status;
mod store;
mod ticket;
mod ticket_answer;
mod two_phase;
mod wire;
mod write_deadline;

use clap::Parser;

fn main() -> std::process::ExitCode {
    // `semaphore run`'s guardian: the same executable, a hidden word that
    // no user types (see `run::guard`).
    if std::env::args_os()
        .nth(1)
        .is_some_and(|word| word == run::guard::SUBCOMMAND)
    {
        return std::process::ExitCode::from(run::guardian::main());
    }
    // And the process it starts to return the lease once the wrapper died.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|word| word == run::guard::RETURNER)
    {
        return std::process::ExitCode::from(run::returner::returner_main());
    }
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return std::process::ExitCode::from(if e.use_stderr() {
                exit::code::USAGE
            } else {
                0
            });
        }
    };
    // Before the runtime's threads exist, so that they inherit the block.
    let drain_signals = match cli.command {
        cli::Command::Serve(_) => serve::DrainSignals::block(),
        _ => serve::DrainSignals::none(),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("semaphore: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(exit::code::SOFTWARE);
        }
    };
    let code = match cli.command {
        cli::Command::Serve(args) => match runtime.block_on(serve::serve(args, drain_signals)) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("semaphore serve: {e}");
                e.exit_code()
            }
        },
        other => match runtime.block_on(commands::run(other)) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("semaphore: {}", e.message);
                e.code
            }
        },
    };
    std::process::ExitCode::from(code)
}
