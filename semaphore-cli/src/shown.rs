//! Text from others (pool names, owner labels) as a terminal shows it
//! safely: it can carry escape sequences (clear the screen, set the
//! window's title), bidirectional overrides that reorder what follows, or
//! line breaks. Each such character (Unicode's control, format, line and
//! paragraph separator categories, the ones labels are refused for) is
//! shown escaped, `\u{1b}`.

use unicode_properties::{GeneralCategory as G, UnicodeGeneralCategory};

/// Whether `c` would not print as it reads on one line.
pub(crate) fn unprintable(c: char) -> bool {
    matches!(
        c.general_category(),
        G::Control | G::Format | G::LineSeparator | G::ParagraphSeparator
    )
}

/// `text` with each unprintable character escaped.
pub(crate) fn escaped(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        if unprintable(c) {
            shown.extend(c.escape_unicode());
        } else {
            shown.push(c);
        }
    }
    shown
}

/// `text` escaped and cut to `max` characters (a `…` marks the cut).
pub(crate) fn cut(text: &str, max: usize) -> String {
    let shown = escaped(text);
    if shown.chars().count() <= max {
        return shown;
    }
    let mut cut: String = shown.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_cannot_steer_the_terminal() {
        assert_eq!(escaped("gpu-job é"), "gpu-job é");
        assert_eq!(escaped("\u{1b}]0;x\u{7}\nX"), "\\u{1b}]0;x\\u{7}\\u{a}X");
        assert_eq!(
            escaped("a\u{202e}b\u{ad}"),
            "a\\u{202e}b\\u{ad}",
            "bidi and format"
        );
        assert_eq!(cut(&"x".repeat(50), 40), format!("{}…", "x".repeat(39)));
        assert_eq!(cut("short", 40), "short");
    }
}
