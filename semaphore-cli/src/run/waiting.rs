//! What `semaphore run` shows while it waits for its slot, and the label
//! its slot shows once held.
//!
//! The waiting line: when standard error is a terminal (and no `--quiet`),
//! one line that says where this run stands, `waiting for a slot of gpus:
//! 3rd in line, 12 s`, drawn again each second in place and cleared when
//! the slot is granted or the wait ends (crossterm moves the cursor and
//! clears the line). It is drawn only while this run is the terminal's
//! foreground job (a background job leaves the prompt alone), cut to the
//! terminal's width (a line that wrapped could not be cleared), with the
//! pool's name escaped ([`shown`](crate::shown)). Its place is its borrower's among everyone known to
//! wait for the pool ([`Pool::queue`]): other processes' queued heads, held
//! places, and the borrowers before it.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use semaphore_core::{PlaceKind, Pool};
use tokio::signal::unix::{SignalKind, signal};

/// The owner label of `--owner` as given (the borrow checks it, and
/// refuses one too long or with a control character), or by default this
/// host, this process and the command's program, `gpu-box/4242 python`:
/// what `semaphore status` and the service's page show for the slot. The
/// default is cut to `max` bytes (the store's owner limit) at a
/// character's end, without the characters a label may not hold (control,
/// format, line and paragraph separators: a program named `my\u{ad}tool`
/// still runs).
pub(crate) fn owner(given: Option<&str>, program: &str, max: usize) -> String {
    if let Some(label) = given {
        return label.to_string();
    }
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "host".into());
    let program = program.rsplit('/').next().unwrap_or(program);
    let label = format!("{host}/{} {program}", std::process::id());
    let mut cut = String::new();
    for c in label.chars().filter(|c| !crate::shown::unprintable(*c)) {
        if cut.len() + c.len_utf8() > max {
            break;
        }
        cut.push(c);
    }
    cut
}

/// `n` as an English ordinal: 1st, 2nd, 3rd, 4th, 11th, 22nd.
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The line for a wait of `waited` at `place` (`None` while this run's
/// place is not known yet).
fn line(name: &str, place: Option<usize>, waited: Duration) -> String {
    let place = place.map_or_else(
        || "in line".to_string(),
        |p| format!("{} in line", ordinal(p)),
    );
    let name = crate::shown::cut(name, 40);
    format!(
        "waiting for a slot of {name}: {place}, {} s",
        waited.as_secs()
    )
}

/// Awaits `borrow` with the waiting line on standard error, if it is a
/// terminal and `quiet` is off; the line is cleared before the answer is
/// given back. The line first shows after a second's wait: a slot granted
/// at once shows nothing.
///
/// On a terminal, Ctrl-C (or TERM, HUP, QUIT) while it waits ends the
/// wait: the borrow is dropped (its place leaves the line at once), the
/// line is cleared, and `Err` gives the signal, for an exit of 128 + its
/// number; the shell's prompt then starts a line of its own. Elsewhere
/// the signals keep their default action.
pub(crate) async fn waiting<T>(
    pool: &Pool,
    name: &str,
    quiet: bool,
    borrow: impl std::future::Future<Output = T>,
) -> Result<T, Signal> {
    let mut borrow = std::pin::pin!(borrow);
    if quiet || !std::io::stderr().is_terminal() {
        return Ok(borrow.await);
    }
    let mut ends: Vec<_> = [
        (SignalKind::interrupt(), Signal::SIGINT),
        (SignalKind::terminate(), Signal::SIGTERM),
        (SignalKind::hangup(), Signal::SIGHUP),
        (SignalKind::quit(), Signal::SIGQUIT),
    ]
    .into_iter()
    .filter_map(|(kind, sig)| Some((signal(kind).ok()?, sig)))
    .collect();
    let started = Instant::now();
    let mut drawn = false;
    let answer = loop {
        tokio::select! {
            answer = &mut borrow => break Ok(answer),
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            sig = super::any(&mut ends) => break Err(sig),
        }
        // This process's first borrower in line is this run's.
        let place = pool
            .queue()
            .await
            .ok()
            .and_then(|line| line.iter().position(|p| p.kind == PlaceKind::Here))
            .map(|i| i + 1);
        draw(Some(&line(name, place, started.elapsed())));
        drawn = true;
    };
    if drawn || answer.is_err() {
        // The line cleared, or the `^C` the terminal echoed: the
        // message that follows starts a line of its own.
        draw(None);
    }
    answer
}

/// Whether this process is in the foreground job of the terminal that
/// standard error is.
fn in_the_foreground() -> bool {
    nix::unistd::tcgetpgrp(std::io::stderr()).is_ok_and(|group| group == nix::unistd::getpgrp())
}

/// Draws `text` over the terminal's current line, cut to its width, or
/// clears it; nothing while this run is a background job.
fn draw(text: Option<&str>) {
    use crossterm::terminal::{Clear, ClearType, size};
    use crossterm::{cursor::MoveToColumn, queue, style::Print};
    if !in_the_foreground() {
        return;
    }
    let mut err = std::io::stderr().lock();
    let _ = queue!(err, MoveToColumn(0), Clear(ClearType::CurrentLine));
    if let Some(text) = text {
        // A terminal that does not know its width (0) gets 80 columns.
        let width = size()
            .ok()
            .map(|(w, _)| usize::from(w))
            .filter(|&w| w > 0)
            .unwrap_or(80)
            .max(2);
        let _ = queue!(err, Print(text.chars().take(width - 1).collect::<String>()));
    }
    let _ = err.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_read_as_ordinals() {
        let read: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111]
            .map(ordinal)
            .into();
        assert_eq!(
            read,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st",
                "111th"
            ]
        );
        assert_eq!(
            line("gpus", Some(3), Duration::from_millis(12_400)),
            "waiting for a slot of gpus: 3rd in line, 12 s"
        );
    }

    #[test]
    fn an_owner_label_fits_the_limit_and_one_line() {
        assert_eq!(owner(Some("job 7"), "x", 64), "job 7", "as given");
        let cut = owner(None, &"é".repeat(40), 40);
        assert!(
            cut.len() <= 40 && cut.ends_with('é'),
            "cut at a character's end: {cut}"
        );
        assert!(
            !owner(None, "a\u{1b}b", 64).contains('\u{1b}'),
            "no control character"
        );
        assert_eq!(
            owner(None, "my\u{ad}tool", 64).split(' ').nth(1),
            Some("mytool"),
            "no format character"
        );
        let default = owner(None, "/usr/bin/python3", 64);
        assert!(
            default.ends_with(&format!("/{} python3", std::process::id())),
            "{default}"
        );
    }
}
