//! Text for an 80-column terminal: durations, sizes, cut cells, wrapped sentences.

use std::time::Duration;

/// The widest line the tool prints.
pub const WIDTH: usize = 80;

/// `850 ms`, `2.4 s`, `3 m 05 s`, `23 h 59 m`, `3 d 4 h`.
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    let s = d.as_secs();
    match s {
        _ if ms < 1_000 => format!("{ms} ms"),
        0..60 => format!("{:.1} s", d.as_secs_f64()),
        60..3_600 => format!("{} m {:02} s", s / 60, s % 60),
        3_600..86_400 => format!("{} h {:02} m", s / 3_600, (s % 3_600) / 60),
        _ => format!("{} d {} h", s / 86_400, (s % 86_400) / 3_600),
    }
}

/// `0 B`, `512 B`, `1.5 KiB`, `3.0 MiB`.
pub fn size(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / KIB),
        _ => format!("{:.1} MiB", bytes as f64 / (KIB * KIB)),
    }
}

/// `text` cut to `width` characters, the cut marked with `…`.
pub fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// `text` padded or cut to exactly `width` characters.
pub fn cell(text: &str, width: usize) -> String {
    let text = cut(text, width);
    let pad = width.saturating_sub(text.chars().count());
    format!("{text}{}", " ".repeat(pad))
}

/// `text` wrapped at word boundaries into lines of at most [`WIDTH`] characters, the first
/// after `first`, the others after `indent` spaces.
pub fn wrap(first: &str, indent: usize, text: &str) -> String {
    let mut out = String::from(first);
    let mut column = first.chars().count();
    let mut line_empty = true;
    for word in text.split_whitespace() {
        let len = word.chars().count();
        if !line_empty && column + 1 + len > WIDTH {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            column = indent;
            line_empty = true;
        }
        if !line_empty {
            out.push(' ');
            column += 1;
        }
        // A word longer than a line (a URL, a key) is cut into lines of its own.
        let mut rest: Vec<char> = word.chars().collect();
        while column + rest.len() > WIDTH && rest.len() > WIDTH - indent {
            let room = WIDTH.saturating_sub(column).max(1);
            out.extend(rest.drain(..room.min(rest.len())));
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            column = indent;
        }
        column += rest.len();
        out.extend(rest);
        line_empty = false;
    }
    out
}

/// `bytes` as text if they are UTF-8, else as hex.
pub fn body(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => bytes.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(duration(Duration::from_millis(850)), "850 ms");
        assert_eq!(duration(Duration::from_millis(2_449)), "2.4 s");
        assert_eq!(duration(Duration::from_secs(185)), "3 m 05 s");
        assert_eq!(duration(Duration::from_secs(86_399)), "23 h 59 m");
        assert_eq!(
            duration(Duration::from_secs(3 * 86_400 + 4 * 3_600)),
            "3 d 4 h"
        );
        assert_eq!(size(1_536), "1.5 KiB");
        assert_eq!(size(3 * 1_048_576), "3.0 MiB");
    }

    #[test]
    fn wrapped_text_and_cells_fit_the_terminal() {
        let long = "word ".repeat(60) + &"x".repeat(200);
        for line in wrap("fail  eviction  ", 16, &long).lines() {
            assert!(line.chars().count() <= WIDTH, "{line:?}");
        }
        assert_eq!(cell("payment.charge", 8), "payment…");
        assert_eq!(cell("a", 3), "a  ");
        assert_eq!(body(&[0xff, 0x00]), "ff00");
    }
}
