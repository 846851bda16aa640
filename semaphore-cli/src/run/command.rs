//! The command `semaphore run` starts: found before the borrow, started in
//! a process group of its own with the lease in its environment.

use std::path::PathBuf;

use semaphore_core::{LeaseGuard, Pool};

use crate::cli::RunArgs;
use crate::exit::{Exit, code};

/// The command line to run, its program found and executable.
#[derive(Debug)]
pub(crate) struct Cmd {
    program: PathBuf,
    /// As given: `{position}` is filled in at spawn.
    argv: Vec<String>,
}

impl Cmd {
    /// Finds the program (on `PATH` unless it names a path) and checks that
    /// it can be executed, so that a typo fails before any slot is taken:
    /// 127 if not found, 126 if not executable.
    pub(crate) fn resolve(args: &RunArgs) -> Result<Self, Exit> {
        let argv = if args.shell {
            vec!["sh".into(), "-c".into(), args.command.join(" ")]
        } else {
            args.command.clone()
        };
        let Some(name) = argv.first() else {
            return Err(Exit::new(
                code::USAGE,
                "no command to run: semaphore run ... -- CMD ARGS",
            ));
        };
        let program = if name.contains('/') {
            let path = PathBuf::from(name);
            match std::fs::metadata(&path) {
                Err(_) => {
                    return Err(Exit::new(code::NOT_FOUND, format!("{name}: no such file")));
                }
                Ok(meta) if meta.is_dir() || !executable(&meta) => {
                    return Err(Exit::new(
                        code::CANNOT_EXECUTE,
                        format!("{name}: cannot execute: not an executable file"),
                    ));
                }
                Ok(_) => path,
            }
        } else {
            which::which(name)
                .map_err(|_| Exit::new(code::NOT_FOUND, format!("{name}: command not found")))?
        };
        Ok(Self { program, argv })
    }

    /// Starts the command in process group `group` (the guardian's), with
    /// the lease's variables (and `CUDA_VISIBLE_DEVICES` from `devices`: the
    /// device of each position the lease holds).
    pub(crate) fn spawn(
        &self,
        lease: &LeaseGuard<Pool>,
        pool: &str,
        devices: Option<&[String]>,
        group: nix::unistd::Pid,
    ) -> Result<tokio::process::Child, Exit> {
        let position = lease.position.to_string();
        let positions = lease.positions.to_string();
        let mut command = tokio::process::Command::new(&self.program);
        command
            .arg0(&self.argv[0])
            .args(self.argv[1..].iter().map(|a| {
                a.replace("{positions}", &positions)
                    .replace("{position}", &position)
            }))
            .env("SEMAPHORE_POSITION", &position)
            .env("SEMAPHORE_POSITIONS", &positions)
            .env("SEMAPHORE_TOKEN", lease.token.to_string())
            .env("SEMAPHORE_LEASE_ID", lease.id.to_string())
            .env("SEMAPHORE_POOL", pool)
            .env(
                "SEMAPHORE_EXPIRES_AT_MS",
                semaphore_core::store::unix_ms(lease.expires_at).to_string(),
            )
            .process_group(group.as_raw())
            .kill_on_drop(true);
        if let Some(devices) = devices {
            // check_positions made sure there is one for every position.
            let visible: Vec<&str> = lease
                .positions
                .iter()
                .filter_map(|p| devices.get(*p as usize).map(String::as_str))
                .collect();
            command.env("CUDA_VISIBLE_DEVICES", visible.join(","));
        }
        let name = &self.argv[0];
        command.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                Exit::new(code::NOT_FOUND, format!("{name}: command not found"))
            }
            _ => Exit::new(code::CANNOT_EXECUTE, format!("{name}: cannot execute: {e}")),
        })
    }
}

fn executable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o111 != 0
}
