//! `semaphore status [--pool NAME]`: what an operator looks at. Without a
//! pool, the store's pools with their fill (the first 1000, in id order);
//! with one, its slots (position, owner, token, time left) and everyone
//! known to wait for it, in line (place, whose, slots, how long). Plain
//! text, `--json` for scripts; `--watch` draws it again every `--interval`
//! until Ctrl-C, in place on a terminal (crossterm: the alternate screen,
//! as `top` does), one snapshot after another elsewhere.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use semaphore_core::store::{MAX_PAGE, Store};
use semaphore_core::{Holder, PlaceKind, Pool, PoolId, PoolState, QueuedPlace};
use serde_json::{Value, json};
use tokio::signal::unix::{Signal, SignalKind};

use crate::cli::StatusArgs;
use crate::exit::{Exit, code};

/// What one look found.
enum Snapshot {
    /// The store's first pools, and whether more follow.
    Pools { pools: Vec<PoolState>, more: bool },
    /// One pool: its state, holders and everyone known to wait.
    Pool {
        shown: String,
        state: PoolState,
        holders: Vec<Holder>,
        queue: Vec<QueuedPlace>,
        now: SystemTime,
    },
}

/// Runs `semaphore status`; the exit code.
pub(crate) async fn status(args: StatusArgs) -> Result<u8, Exit> {
    let store = crate::store::Choice::from(args.store.flags())?
        .for_reading()?
        .open(Some(1))
        .await
        .map_err(Exit::from_store)?;
    let pool = match (&args.pool, args.pool_id) {
        (Some(name), _) => Some((PoolId::from_name(name), name.clone())),
        (None, Some(id)) => Some((PoolId::from_uuid(id), id.to_string())),
        (None, None) => None,
    };
    let look = || look(&store, pool.as_ref());
    if !args.watch {
        return written(print(
            &look().await?,
            args.json,
            &mut std::io::stdout().lock(),
        ));
    }
    // A terminal that cannot move its cursor gets plain frames.
    let terminal = !args.json
        && std::io::stdout().is_terminal()
        && std::env::var_os("TERM").is_none_or(|t| t != "dumb");
    let mut screen = terminal.then(Screen::enter).transpose()?;
    let mut ends = Ends::listen()?;
    loop {
        // An early return leaves the screen (its drop) before the error
        // is printed.
        let snapshot = look().await?;
        let drawn = match &screen {
            Some(screen) => screen.draw(&lines(&snapshot)),
            None => print(&snapshot, args.json, &mut std::io::stdout().lock()),
        };
        if drawn.is_err() {
            return written(drawn);
        }
        match ends.within(args.interval).await {
            End::Not => {}
            End::Stop if screen.is_some() => {
                // The shell's prompt goes on the terminal's own screen;
                // the watch comes back to its own when continued.
                drop(screen.take());
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
                screen = Some(Screen::enter()?);
            }
            End::Stop => {
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
            }
            End::Exit(code) => return Ok(code),
        }
    }
}

/// What ended a wait between two looks.
enum End {
    /// The interval passed.
    Not,
    /// Ctrl-Z (SIGTSTP): stop, the screen left.
    Stop,
    /// Ctrl-C (exit 0), or TERM, HUP or QUIT (exit 128 + its number): the
    /// screen is left as the watch ends.
    Exit(u8),
}

/// The signals that end or stop a watch, caught so that the terminal is
/// given back as it was (the alternate screen left, the cursor shown).
struct Ends {
    int: Signal,
    term: Signal,
    hup: Signal,
    quit: Signal,
    tstp: Signal,
}

impl Ends {
    fn listen() -> Result<Self, Exit> {
        use nix::sys::signal::Signal::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGTSTP};
        let on = |number: nix::sys::signal::Signal| {
            tokio::signal::unix::signal(SignalKind::from_raw(number as i32))
                .map_err(|e| Exit::new(code::SOFTWARE, format!("listening for {number}: {e}")))
        };
        Ok(Ends {
            int: on(SIGINT)?,
            term: on(SIGTERM)?,
            hup: on(SIGHUP)?,
            quit: on(SIGQUIT)?,
            tstp: on(SIGTSTP)?,
        })
    }

    /// Waits `interval` or for a signal, whichever comes first.
    async fn within(&mut self, interval: Duration) -> End {
        tokio::select! {
            _ = self.int.recv() => End::Exit(0),
            _ = self.term.recv() => End::Exit(128 + 15),
            _ = self.hup.recv() => End::Exit(128 + 1),
            _ = self.quit.recv() => End::Exit(128 + 3),
            _ = self.tstp.recv() => End::Stop,
            () = tokio::time::sleep(interval) => End::Not,
        }
    }
}

/// One look at the store: the pools, or pool `pool`.
async fn look(store: &Arc<dyn Store>, pool: Option<&(PoolId, String)>) -> Result<Snapshot, Exit> {
    let Some((id, shown)) = pool else {
        let pools = Pool::list(store, None, MAX_PAGE)
            .await
            .map_err(Exit::from_store)?;
        let more = pools.len() == MAX_PAGE as usize;
        return Ok(Snapshot::Pools { pools, more });
    };
    let pool = Pool::new(store.clone(), *id);
    let state = pool.inspect().await.map_err(Exit::from_store)?;
    let holders = pool.holders().await.map_err(Exit::from_store)?;
    let queue = pool.queue().await.map_err(Exit::from_store)?;
    Ok(Snapshot::Pool {
        shown: shown.clone(),
        state,
        holders,
        queue,
        now: store.clock().now(),
    })
}

/// `snapshot` printed once: its lines and a blank one, or its JSON on
/// one line.
fn print(snapshot: &Snapshot, as_json: bool, out: &mut impl Write) -> std::io::Result<()> {
    if as_json {
        writeln!(out, "{}", to_json(snapshot))?;
    } else {
        for line in lines(snapshot) {
            writeln!(out, "{line}")?;
        }
        writeln!(out)?;
    }
    out.flush()
}

/// The exit code once the output is written: 0, also when its reader
/// has gone (`semaphore status --watch | head`); else 74.
fn written(result: std::io::Result<()>) -> Result<u8, Exit> {
    match result {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(io(e)),
    }
}

/// `slots` cells, `#` for each held (at most 40 cells drawn).
fn fill(state: &PoolState) -> String {
    let cells = state.count.min(40) as usize;
    let held = (state.in_use.min(state.count) as usize * cells)
        .checked_div(state.count as usize)
        .unwrap_or(0);
    format!("[{}{}]", "#".repeat(held), ".".repeat(cells - held))
}

/// Whole seconds from `from` to `to`, 0 if `to` is not later.
fn seconds(from: SystemTime, to: SystemTime) -> u64 {
    to.duration_since(from).map_or(0, |d| d.as_secs())
}

/// Whose place it is, in words.
fn whose(kind: PlaceKind) -> &'static str {
    match kind {
        PlaceKind::Here => "this process",
        PlaceKind::Held => "a ticket",
        _ => "a process (more may wait behind it)",
    }
}

/// The snapshot as lines of text.
fn lines(snapshot: &Snapshot) -> Vec<String> {
    match snapshot {
        Snapshot::Pools { pools, more } => {
            let mut out = vec![format!(
                "{:<36}  {:>5}  {:>6}  {:>6}  {:<8}  fill",
                "pool", "count", "in_use", "queued", "draining"
            )];
            out.extend(pools.iter().map(|s| {
                format!(
                    "{:<36}  {:>5}  {:>6}  {:>6}  {:<8}  {}",
                    s.id.to_string(),
                    s.count,
                    s.in_use,
                    s.queued,
                    if s.draining { "draining" } else { "" },
                    fill(s)
                )
            }));
            if pools.is_empty() {
                out.push(
                    "no pools: register one (semaphore register --pool NAME --count N)".into(),
                );
            }
            if *more {
                out.push(format!(
                    "... the first {MAX_PAGE} shown: semaphore pools lists them all"
                ));
            }
            out
        }
        Snapshot::Pool {
            shown,
            state,
            holders,
            queue,
            now,
        } => {
            let mut out = vec![format!(
                "pool {} ({}): {} of {} slots in use{}  {}",
                crate::shown::cut(shown, 40),
                state.id,
                state.in_use,
                state.count,
                if state.draining { ", draining" } else { "" },
                fill(state)
            )];
            out.push(format!(
                "{:<9}  {:<40}  {:>8}  {:>9}",
                "slot", "owner", "token", "time left"
            ));
            out.extend(holders.iter().map(|h| {
                format!(
                    "{:<9}  {:<40}  {:>8}  {:>8}s",
                    h.lease.positions.to_string(),
                    crate::shown::cut(h.owner.as_deref().unwrap_or("-"), 40),
                    h.lease.token,
                    seconds(*now, h.lease.expires_at)
                )
            }));
            if holders.is_empty() {
                out.push("(no slot held)".into());
            }
            out.push(String::new());
            out.push(format!(
                "{:<6}  {:<36}  {:>5}  {:>7}",
                "place", "waiting", "slots", "waited"
            ));
            out.extend(queue.iter().enumerate().map(|(i, p)| {
                format!(
                    "{:<6}  {:<36}  {:>5}  {:>6}s",
                    i + 1,
                    whose(p.kind),
                    p.slots,
                    seconds(p.since, *now)
                )
            }));
            if queue.is_empty() {
                out.push("(no one waits)".into());
            }
            out
        }
    }
}

/// A pool's state as `status --json` and `pools --json` print it.
pub(crate) fn state_json(s: &PoolState) -> Value {
    json!({
        "id": s.id.to_string(), "count": s.count, "in_use": s.in_use,
        "available": s.available, "queued": s.queued, "draining": s.draining,
    })
}

/// The snapshot as JSON.
fn to_json(snapshot: &Snapshot) -> Value {
    match snapshot {
        Snapshot::Pools { pools, more } => json!({
            "pools": pools.iter().map(state_json).collect::<Vec<_>>(),
            "more": more,
        }),
        Snapshot::Pool {
            state: s,
            holders,
            queue,
            now,
            ..
        } => json!({
            "pool": state_json(s),
            "slots": holders.iter().map(|h| json!({
                "position": h.lease.position,
                "positions": &h.lease.positions[..],
                "owner": h.owner,
                "token": h.lease.token,
                "expires_in_ms": h.lease.expires_at.duration_since(*now).map_or(0, |d| d.as_millis() as u64),
            })).collect::<Vec<_>>(),
            "waiters": queue.iter().enumerate().map(|(i, p)| json!({
                "place": i + 1,
                "kind": crate::wire::place_kind(p.kind),
                "slots": p.slots,
                "waited_ms": now.duration_since(p.since).map_or(0, |d| d.as_millis() as u64),
            })).collect::<Vec<_>>(),
        }),
    }
}

/// The terminal's alternate screen while `--watch` draws on it; left, with
/// the cursor shown again, when dropped.
struct Screen;

impl Screen {
    fn enter() -> Result<Self, Exit> {
        use crossterm::{cursor::Hide, execute, terminal::EnterAlternateScreen};
        execute!(std::io::stdout(), EnterAlternateScreen, Hide).map_err(io)?;
        Ok(Screen)
    }

    /// Draws `lines` from the top left, each cut to the screen's width,
    /// as many as fit its height.
    fn draw(&self, lines: &[String]) -> std::io::Result<()> {
        use crossterm::cursor::MoveTo;
        use crossterm::terminal::{Clear, ClearType, size};
        use crossterm::{queue, style::Print};
        // A terminal that does not know its size (0 by 0) gets 80 by 24.
        let (width, height) = size()
            .ok()
            .filter(|&(w, h)| w > 0 && h > 0)
            .unwrap_or((80, 24));
        let mut out = std::io::stdout().lock();
        queue!(out, MoveTo(0, 0), Clear(ClearType::All))?;
        for (row, line) in lines.iter().take(usize::from(height)).enumerate() {
            let cut: String = line.chars().take(usize::from(width)).collect();
            queue!(out, MoveTo(0, row as u16), Print(cut))?;
        }
        out.flush()
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        use crossterm::{cursor::Show, execute, terminal::LeaveAlternateScreen};
        let _ = execute!(std::io::stdout(), LeaveAlternateScreen, Show);
    }
}

fn io(e: std::io::Error) -> Exit {
    Exit::new(code::IOERR, format!("writing the status: {e}"))
}

/// The interval's floor: a look is a few store calls.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fill_has_a_cell_a_slot() {
        let state = |count, in_use| PoolState::new(PoolId::from_name("p"), count, in_use);
        assert_eq!(fill(&state(4, 1)), "[#...]");
        assert_eq!(
            fill(&state(2, 5)),
            "[##]",
            "over the count after a lowering"
        );
        assert_eq!(fill(&state(0, 0)), "[]");
        assert_eq!(fill(&state(1000, 500)).len(), 42, "40 cells at most");
    }
}
