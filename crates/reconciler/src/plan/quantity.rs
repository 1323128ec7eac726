//! Exact values of Kubernetes resource quantities (`500m`, `8Gi`, `1e3`), for deciding whether
//! the API server already stores what Homestead asks for.
//!
//! `kube_quantity` was the first choice, but it converts between binary and decimal suffixes
//! through `f32`, so `8Gi` and `8589934592` compare unequal one way round; this module does the
//! arithmetic in integers instead. Grammar and rounding follow
//! <https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/>.

/// Nano-units (10^-9) per unit.
const NANO: i128 = 1_000_000_000;

/// The exact value of quantity `s` in nano-units (10^-9 of the base unit: `1m` is 1,000,000),
/// rounded up to a whole nano-unit as the API server does; `None` if `s` is not a quantity or
/// its value does not fit (beyond about 10^20 base units).
pub fn nano_value(s: &str) -> Option<i128> {
    let (negative, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_len = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_len);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let digits: String = [whole, fraction].concat();
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    let (binary_power, decimal_exponent) = suffix_scale(suffix)?;
    let scaled = mantissa.checked_mul(1_i128.checked_shl(10 * binary_power)?)?;
    let exponent = 9 + decimal_exponent - i32::try_from(fraction.len()).ok()?;
    let value = if exponent >= 0 {
        scaled.checked_mul(10_i128.checked_pow(exponent.unsigned_abs())?)?
    } else {
        let divisor = 10_i128.checked_pow(exponent.unsigned_abs())?;
        (scaled + divisor - 1) / divisor
    };
    Some(if negative { -value } else { value })
}

/// The scale a suffix stands for: (power of 1024, power of 10).
fn suffix_scale(suffix: &str) -> Option<(u32, i32)> {
    const BINARY: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    const DECIMAL: [(&str, i32); 10] = [
        ("n", -9),
        ("u", -6),
        ("m", -3),
        ("", 0),
        ("k", 3),
        ("M", 6),
        ("G", 9),
        ("T", 12),
        ("P", 15),
        ("E", 18),
    ];
    if let Some(i) = BINARY.iter().position(|b| *b == suffix) {
        return Some((u32::try_from(i).ok()? + 1, 0));
    }
    if let Some((_, exponent)) = DECIMAL.iter().find(|(d, _)| *d == suffix) {
        return Some((0, *exponent));
    }
    let exponent = suffix.strip_prefix(['e', 'E'])?;
    Some((0, exponent.parse().ok().filter(|e: &i32| e.abs() <= 30)?))
}

/// `nano` rounded up to a multiple of `1m`, as the API server stores every resource quantity
/// (`SetDefaults_ResourceList` rounds up to milli scale).
pub fn round_up_to_milli(nano: i128) -> i128 {
    const MILLI: i128 = NANO / 1000;
    nano.div_euclid(MILLI) * MILLI + if nano.rem_euclid(MILLI) > 0 { MILLI } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_exact() {
        for (s, nano) in [
            ("1", NANO),
            ("1000m", NANO),
            ("0.5", NANO / 2),
            ("500m", NANO / 2),
            ("1k", 1000 * NANO),
            ("1e3", 1000 * NANO),
            ("1E3", 1000 * NANO),
            ("1Ki", 1024 * NANO),
            ("8Gi", 8_589_934_592 * NANO),
            ("8589934592", 8_589_934_592 * NANO),
            ("1Ei", 1_152_921_504_606_846_976 * NANO),
            ("1E", 1_000_000_000_000_000_000 * NANO),
            ("100u", 100_000),
            ("0.1m", 100_000),
            ("1n", 1),
            ("0.1n", 1),
            ("-5", -5 * NANO),
            ("+2", 2 * NANO),
            (".5", NANO / 2),
            ("5.", 5 * NANO),
        ] {
            assert_eq!(nano_value(s), Some(nano), "{s}");
        }
        for bad in [
            "", "lots", "1.5.5", "1Gb", "Gi", ".", "-", "1e", "1e99", "１",
        ] {
            assert_eq!(nano_value(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn rounding_up_to_milli() {
        assert_eq!(round_up_to_milli(100_000), 1_000_000);
        assert_eq!(round_up_to_milli(1_000_000), 1_000_000);
        assert_eq!(round_up_to_milli(1_000_001), 2_000_000);
        assert_eq!(round_up_to_milli(0), 0);
    }
}
