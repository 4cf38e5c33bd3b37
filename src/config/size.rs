//! Byte counts written for people: `"512 MiB"`, `"8GiB"`, `"1.5 TB"`, `"1000000"`.

/// Parses a byte count with an optional unit (B, KB/KiB, MB/MiB, GB/GiB, TB/TiB; SI units are
/// powers of 1000, binary ones of 1024). Bounded: at most 32 characters.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.is_empty() || t.len() > 32 {
        return Err(format!("\"{text}\" is not a byte count such as \"8 GiB\""));
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        other => {
            return Err(format!("unknown unit \"{other}\" (use B, KiB, MiB, GiB, TiB or KB, MB, GB, TB)"));
        }
    };
    let bad = || format!("\"{text}\" is not a byte count such as \"8 GiB\"");
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || frac.contains('.') || frac.len() > 6 {
        return Err(bad());
    }
    let whole: u64 = whole.parse().map_err(|_| bad())?;
    let frac_scaled = if frac.is_empty() {
        0
    } else {
        let digits: u64 = frac.parse().map_err(|_| bad())?;
        // frac has at most 6 digits, so this cannot overflow for any scale up to TiB.
        (u128::from(digits) * u128::from(scale) / 10u128.pow(frac.len() as u32)) as u64
    };
    whole.checked_mul(scale).and_then(|w| w.checked_add(frac_scaled)).ok_or_else(|| format!("\"{text}\" is too large"))
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn units_and_fractions() {
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("8 GiB"), Ok(8 << 30));
        assert_eq!(parse_bytes("8GiB"), Ok(8 << 30));
        assert_eq!(parse_bytes("1.5 KiB"), Ok(1536));
        assert_eq!(parse_bytes("2 MB"), Ok(2_000_000));
        assert_eq!(parse_bytes(" 3 TiB "), Ok(3 << 40));
    }

    #[test]
    fn nonsense_is_refused_with_a_reason() {
        for bad in ["", "GiB", "1.2.3 MiB", "-1", "1 GB of love", "99999999999999999999", "20000000 TiB", "1.1234567 B"]
        {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
        assert!(parse_bytes(&"9".repeat(40)).unwrap_err().contains("not a byte count"));
    }
}
