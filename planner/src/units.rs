//! Byte sizes as people write them: `80GiB`, `512GB`, `1.5TiB`, `4096`.

use crate::{Error, Result};

/// Parses a byte count: a plain integer, or a number followed by a unit
/// (`B`, `KB`, `MB`, `GB`, `TB`, `PB`, `EB` in powers of 1000; `KiB`,
/// `MiB`, `GiB`, `TiB`, `PiB`, `EiB` in powers of 1024; case-insensitive,
/// optional space, an optional
/// `+`). A unit of one letter (`80G`) is refused as ambiguous, and one
/// with a capital prefix and a small `b` (`64Mb`) as bits.
pub fn parse_bytes(text: &str) -> Result<u64> {
    // A plus sign says nothing: `+64MiB` is 64 MiB.
    let trimmed = text.trim();
    let trimmed = trimmed.strip_prefix('+').unwrap_or(trimmed);
    if trimmed.starts_with('-') {
        return Err(Error::invalid(
            format!("byte size {text:?}"),
            "a size cannot be negative",
        ));
    }
    let mut split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(trimmed.len());
    // An exponent (`1e9`, `2.5E+3`) belongs to the number, as percentages
    // take it (`1e2%`): an `e` with digits after it (`EB` and `EiB` have
    // none).
    let rest = &trimmed[split..];
    if split > 0 && rest.starts_with(['e', 'E']) {
        let signed = rest[1..].strip_prefix(['+', '-']).unwrap_or(&rest[1..]);
        let digits = signed.len()
            - signed
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .len();
        if digits > 0 {
            split += rest.len() - signed.len() + digits;
        }
    }
    let (number, unit) = trimmed.split_at(split);
    let number = number.replace('_', "");
    // `Mb`, `Gib`: a capital prefix with a small `b` is written for bits.
    let written = unit.trim();
    if written.len() > 1
        && written.ends_with('b')
        && written.chars().any(|c| c.is_ascii_uppercase())
    {
        let bytes = written[..written.len() - 1].to_string() + "B";
        return Err(Error::invalid(
            format!("byte size {text:?}"),
            format!("{written} reads as bits; write {bytes} for bytes"),
        ));
    }
    let unit = written.to_ascii_lowercase();
    let scale: u64 = match unit.as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "pb" => 1_000_000_000_000_000,
        "eb" => 1_000_000_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "pib" => 1 << 50,
        "eib" => 1 << 60,
        // One letter is read one way by some tools and the other way by
        // others: which is asked for.
        "k" | "m" | "g" | "t" | "p" => {
            let letter = unit.to_ascii_uppercase();
            return Err(Error::invalid(
                format!("byte size {text:?}"),
                format!("{letter} is ambiguous; write {letter}B (powers of 1000) or {letter}iB (powers of 1024)"),
            ));
        }
        _ => {
            return Err(Error::invalid(
                format!("byte size {text:?}"),
                format!(
                    "unknown unit {unit:?}; use B, KB, MB, GB, TB, PB, EB, KiB, MiB, GiB, TiB, PiB \
                     or EiB"
                ),
            ))
        }
    };
    if number.is_empty() {
        return Err(Error::invalid(format!("byte size {text:?}"), "no number"));
    }
    if let Ok(whole) = number.parse::<u64>() {
        return whole
            .checked_mul(scale)
            .ok_or_else(|| Error::invalid(format!("byte size {text:?}"), "2^64 bytes or more"));
    }
    let value: f64 = number
        .parse()
        .map_err(|_| Error::invalid(format!("byte size {text:?}"), "not a number"))?;
    let bytes = value * scale as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(Error::invalid(
            format!("byte size {text:?}"),
            "2^64 bytes or more",
        ));
    }
    // A fraction of a larger unit rounds to the nearest byte (0.3KiB is
    // 307 bytes); a fraction of a byte, or a size that would round to
    // none, is not what was meant.
    if scale == 1 && bytes.fract() != 0.0 {
        return Err(Error::invalid(
            format!("byte size {text:?}"),
            format!("{value} is not a whole number of bytes"),
        ));
    }
    if bytes > 0.0 && bytes.round() == 0.0 {
        return Err(Error::invalid(
            format!("byte size {text:?}"),
            format!("{bytes} bytes, less than one"),
        ));
    }
    Ok(bytes.round() as u64)
}

/// Formats a byte count with a binary unit, three significant digits.
pub fn format_bytes(bytes: u64) -> String {
    format_rounded(bytes, false)
}

/// [`format_bytes`] rounded up: the size printed is never below `bytes`,
/// so a budget printed as one that fits, given back, fits too.
pub fn format_bytes_up(bytes: u64) -> String {
    format_rounded(bytes, true)
}

/// In the largest unit that leaves at least 1 (up to EiB): two decimals
/// below 10 of it, one below 100, none from 100 on (the decimals chosen
/// before rounding, so 9.996 GiB prints `10.00 GiB`), rounded to the
/// nearest or, where `up`, up.
fn format_rounded(bytes: u64, up: bool) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        return format!("{bytes} B");
    }
    let decimals = if value >= 100.0 {
        0
    } else if value >= 10.0 {
        1
    } else {
        2
    };
    let rounded = |value: f64, decimals: i32| {
        let scale = 10f64.powi(decimals);
        match up {
            true => (value * scale).ceil() / scale,
            false => (value * scale).round() / scale,
        }
    };
    let mut value = rounded(value, decimals);
    let mut decimals = decimals;
    // 1023.6 MiB rounds to 1024 MiB: written in the next unit, as 1 GiB is.
    if value >= 1024.0 && unit + 1 < UNITS.len() {
        decimals = 2;
        value = rounded(value / 1024.0, decimals);
        unit += 1;
    }
    format!("{value:.*} {}", decimals as usize, UNITS[unit])
}

/// A byte count for a message: `n bytes` (`1 byte`), and from 1 KiB on in
/// a binary unit first, `953 MiB (999643848 bytes)`.
pub fn bytes_exact(n: u64) -> String {
    let exact = count(n, "byte");
    match n < 1024 {
        true => exact,
        false => format!("{} ({exact})", format_bytes(n)),
    }
}

/// The median (the mean of the middle two of an even count); 0 when
/// empty. Sorts `values`.
pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// `n` and `noun`, the noun plural unless `n` is 1 ("1 epoch", "3
/// epochs"); `noun` is a singular that takes an "s".
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Formats seconds with a unit that keeps three significant digits.
pub fn format_seconds(seconds: f64) -> String {
    // None at all reads as none, not in the smallest unit beside larger.
    if seconds == 0.0 {
        return "0 s".to_string();
    }
    if seconds >= 1e6 {
        // Not hundreds of digits for an edited plan's 1e308.
        format!("{seconds:.3e} s")
    } else if seconds >= 1.0 {
        format!("{seconds:.3} s")
    } else if seconds >= 1e-3 {
        format!("{:.3} ms", seconds * 1e3)
    } else {
        format!("{:.3} us", seconds * 1e6)
    }
}

/// `; did you mean X?` (or `X or Y`) for a name `given` that is none of
/// `known`: those it begins (`h100` of `h100-sxm`), or where it begins
/// none, those within two edits of it (a letter left out, added or
/// changed: `ogbn-product`, `gcm`), in any case; empty where none is
/// near.
pub fn did_you_mean(given: &str, known: &[&str]) -> String {
    let given = given.to_ascii_lowercase();
    let chars: Vec<char> = given.chars().collect();
    let mut near: Vec<(usize, &str)> = known
        .iter()
        .filter_map(|&name| {
            let lower = name.to_ascii_lowercase();
            if chars.len() >= 2 && lower.starts_with(&given) {
                return Some((0, name));
            }
            let distance = edits(&chars, &lower.chars().collect::<Vec<_>>());
            (distance <= 2 && distance * 3 <= chars.len()).then_some((distance, name))
        })
        .collect();
    // Names it begins, where there are some; else the nearest first.
    if near.iter().any(|&(distance, _)| distance == 0) {
        near.retain(|&(distance, _)| distance == 0);
    }
    near.sort_by_key(|&(distance, _)| distance);
    let names: Vec<&str> = near.iter().map(|&(_, name)| name).take(3).collect();
    match names.len() {
        0 => String::new(),
        1 => format!("; did you mean {}?", names[0]),
        n => format!(
            "; did you mean {} or {}?",
            names[..n - 1].join(", "),
            names[n - 1]
        ),
    }
}

/// The edits (a character inserted, removed or changed) from `a` to `b`.
fn edits(a: &[char], b: &[char]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &x) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(x != y));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// A figure as a person reads it: at most nine significant digits
/// (`0.0122875488`, not `0.012287548799999989`), and an exponent where
/// plainly would take many zeros (`1e308`, `1.5e-7`).
pub fn figure(value: f64) -> String {
    if value == 0.0 || !value.is_finite() {
        return value.to_string();
    }
    let magnitude = value.abs();
    if !(1e-4..1e9).contains(&magnitude) {
        let text = format!("{value:.8e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
        return format!("{mantissa}e{exponent}");
    }
    let decimals = (8 - magnitude.log10().floor() as i32).max(0) as usize;
    let text = format!("{value:.decimals$}");
    match text.contains('.') {
        true => text.trim_end_matches('0').trim_end_matches('.').to_string(),
        false => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_keep_three_digits_and_none_is_none() {
        assert_eq!(format_seconds(0.0), "0 s");
        assert_eq!(format_seconds(2.5e-7), "0.250 us");
        assert_eq!(format_seconds(0.0125), "12.500 ms");
        assert_eq!(format_seconds(3.0), "3.000 s");
        assert_eq!(format_seconds(999_999.0), "999999.000 s");
        assert_eq!(format_seconds(1e308), "1.000e308 s");
    }

    #[test]
    fn names_near_one_given_are_suggested() {
        let known = ["a100-80g", "h100-sxm", "h200", "h100-measured", "cpu-small"];
        assert_eq!(
            did_you_mean("h100", &known),
            "; did you mean h100-sxm or h100-measured?"
        );
        assert_eq!(did_you_mean("H20", &known), "; did you mean h200?");
        assert_eq!(
            did_you_mean("cpu_small", &known),
            "; did you mean cpu-small?"
        );
        assert_eq!(did_you_mean("tpu-v5", &known), "");
        assert_eq!(did_you_mean("h", &known), "");
        let datasets = ["ogbn-arxiv", "ogbn-products", "reddit"];
        assert_eq!(
            did_you_mean("ogbn-product", &datasets),
            "; did you mean ogbn-products?"
        );
        assert_eq!(
            did_you_mean("gcm", &["gcn", "sage", "gat"]),
            "; did you mean gcn?"
        );
        assert_eq!(did_you_mean("cora", &datasets), "");
    }

    #[test]
    fn a_figure_is_nine_digits_at_most() {
        assert_eq!(figure(0.012287548799999989), "0.0122875488");
        assert_eq!(figure(1.0), "1");
        assert_eq!(figure(0.0), "0");
        assert_eq!(figure(-2.5), "-2.5");
        assert_eq!(figure(1e308), "1e308");
        assert_eq!(figure(1.5e-7), "1.5e-7");
        assert_eq!(figure(123456.789), "123456.789");
    }

    #[test]
    fn one_of_a_thing_is_singular() {
        assert_eq!(count(1, "epoch"), "1 epoch");
        assert_eq!(count(0, "step"), "0 steps");
        assert_eq!(count(3, "epoch"), "3 epochs");
        assert_eq!(bytes_exact(1), "1 byte");
        assert_eq!(bytes_exact(1023), "1023 bytes");
        assert_eq!(bytes_exact(131031396), "125 MiB (131031396 bytes)");
    }

    #[test]
    fn parses_units() {
        assert_eq!(parse_bytes("80GiB").unwrap(), 80 << 30);
        assert_eq!(parse_bytes("512GB").unwrap(), 512_000_000_000);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("1e3").unwrap(), 1000);
        assert_eq!(parse_bytes("2.5E+3 KiB").unwrap(), 2_560_000);
        assert_eq!(parse_bytes("4e1MB").unwrap(), 40_000_000);
        assert!(parse_bytes("1e")
            .unwrap_err()
            .to_string()
            .contains("unknown unit \"e\""));
        assert_eq!(parse_bytes("1.5 KiB").unwrap(), 1536);
        assert_eq!(parse_bytes("2tib").unwrap(), 2 << 40);
        assert_eq!(parse_bytes("1PiB").unwrap(), 1 << 50);
        assert_eq!(parse_bytes("15EiB").unwrap(), 15 << 60);
        assert_eq!(parse_bytes("2 EB").unwrap(), 2_000_000_000_000_000_000);
        assert!(parse_bytes("16EiB")
            .unwrap_err()
            .to_string()
            .contains("2^64 bytes or more"));
        assert_eq!(parse_bytes("3 PB").unwrap(), 3_000_000_000_000_000);
        assert!(parse_bytes("20000PiB").is_err());
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("GiB").is_err());
        let one_letter = parse_bytes("80G").unwrap_err().to_string();
        assert!(
            one_letter.contains("G is ambiguous; write GB"),
            "{one_letter}"
        );
        let negative = parse_bytes("-5MiB").unwrap_err().to_string();
        assert!(
            negative.contains("\"-5MiB\"") && negative.contains("cannot be negative"),
            "{negative}"
        );
        assert!(parse_bytes("99999999999999TiB").is_err());
        // A capital prefix with a small b is bits; a plus sign is allowed.
        for (text, says) in [
            ("64Mb", "Mb reads as bits; write MB for bytes"),
            ("2 Gib", "Gib reads as bits; write GiB for bytes"),
        ] {
            let message = parse_bytes(text).unwrap_err().to_string();
            assert!(message.contains(says), "{message}");
        }
        assert_eq!(parse_bytes("64mb").unwrap(), 64_000_000);
        assert_eq!(parse_bytes("+64MiB").unwrap(), 64 << 20);
        // A fraction of a byte, or of a unit below one byte, is refused;
        // of a larger unit, rounded to the nearest byte.
        assert_eq!(parse_bytes("0.3KiB").unwrap(), 307);
        assert_eq!(parse_bytes("0").unwrap(), 0);
        for (text, says) in [
            ("0.5", "0.5 is not a whole number of bytes"),
            ("1.7B", "1.7 is not a whole number of bytes"),
            ("1e-3", "0.001 is not a whole number of bytes"),
            ("0.0001KiB", "0.1024 bytes, less than one"),
        ] {
            let message = parse_bytes(text).unwrap_err().to_string();
            assert!(
                message.contains(&format!("{text:?}")) && message.contains(says),
                "{text}: {message}"
            );
        }
    }

    #[test]
    fn formats() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(80 << 30), "80.0 GiB");
        assert_eq!(format_seconds(0.0125), "12.500 ms");
        // 9.996 GiB: rounded to 10.00, or up.
        let b = (9.996 * (1u64 << 30) as f64) as u64;
        assert_eq!(format_bytes(b), "10.00 GiB");
        assert_eq!(format_bytes_up(b), "10.00 GiB");
        assert_eq!(
            format_bytes((250.2 * (1u64 << 30) as f64) as u64),
            "250 GiB"
        );
        assert_eq!(
            format_bytes_up((250.2 * (1u64 << 30) as f64) as u64),
            "251 GiB"
        );
        assert_eq!(format_bytes_up(80 << 30), "80.0 GiB");
        // Past TiB: an unlimited budget reads as what it is.
        assert_eq!(format_bytes(3 << 50), "3.00 PiB");
        // Just under a unit, rounded to it: written in it.
        let under = (1u64 << 30) - (300 << 10);
        assert_eq!(format_bytes(under), "1.00 GiB");
        assert_eq!(format_bytes_up(under), "1.00 GiB");
        assert_eq!(format_bytes((1u64 << 30) - (600 << 10)), "1023 MiB");
        assert_eq!(format_bytes(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn a_size_rounded_up_reads_back_no_smaller_and_close() {
        let mut bytes = 1u64;
        while bytes < 1 << 50 {
            for b in [bytes, bytes + 1, bytes * 3 / 2, bytes * 1023 / 1000] {
                let text = format_bytes_up(b).replace(' ', "");
                let back = parse_bytes(&text).unwrap();
                assert!(back >= b, "{b} printed {text}, read back {back}");
                assert!(back as f64 <= b as f64 * 1.01 + 1.0, "{b} printed {text}");
            }
            bytes = bytes * 7 / 5 + 1;
        }
    }
}
