//! Python's number and JSON formats, so that what the guest's tools write
//! stays byte for byte what the inline python3 of scripts/bench-guest wrote
//! before (results.jsonl, the text tables, the `key=value` lines).

use std::fmt::Write as _;

/// The sign, the shortest round-trip digits and the decimal exponent of a
/// finite `x` (x = 0.DIGITS × 10^decpt, Python's `decpt`).
fn shortest(x: f64) -> (bool, String, i32) {
    // Rust's `{:e}` has the fewest digits that round-trip, as Python's
    // repr has ("1.2345e4"); but where two such strings are as close (a
    // tie: 103462606979301.125 to 17 digits) it rounds up, Python to even.
    // So: that many digits again, correctly rounded (half to even).
    let short = format!("{:e}", x.abs());
    let n = short
        .split_once('e')
        .map_or(1, |(m, _)| m.chars().filter(char::is_ascii_digit).count());
    let even = format!("{:.*e}", n.saturating_sub(1), x.abs());
    // (Below a power of two the interval that rounds to x is narrower:
    // there the nearest may not round-trip, and the other one is Python's.)
    let s = if even.parse::<f64>().ok() == Some(x.abs()) {
        even
    } else {
        short
    };
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let digits: String = mant.chars().filter(char::is_ascii_digit).collect();
    let exp: i32 = exp.parse().unwrap_or(0);
    (x.is_sign_negative(), digits, exp + 1)
}

fn nonfinite(x: f64) -> Option<&'static str> {
    if x.is_nan() {
        Some("nan")
    } else if x == f64::INFINITY {
        Some("inf")
    } else if x == f64::NEG_INFINITY {
        Some("-inf")
    } else {
        None
    }
}

/// `repr(x)` (and `str(x)`, `"%s" % x`) of a Python float.
pub fn repr(x: f64) -> String {
    if let Some(s) = nonfinite(x) {
        return s.into();
    }
    let (neg, digits, decpt) = shortest(x);
    let mut s = String::from(if neg { "-" } else { "" });
    let n = digits.len() as i32;
    if decpt <= -4 || decpt > 16 {
        s.push_str(&digits[..1]);
        if n > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        let _ = write!(s, "e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    } else if decpt <= 0 {
        s.push_str("0.");
        s.push_str(&"0".repeat((-decpt) as usize));
        s.push_str(&digits);
    } else if decpt >= n {
        s.push_str(&digits);
        s.push_str(&"0".repeat((decpt - n) as usize));
        s.push_str(".0");
    } else {
        s.push_str(&digits[..decpt as usize]);
        s.push('.');
        s.push_str(&digits[decpt as usize..]);
    }
    s
}

/// `"%.<prec>f" % x`. Rust's fixed formatting rounds the exact binary value
/// half to even, as Python's does.
pub fn fixed(x: f64, prec: usize) -> String {
    match nonfinite(x) {
        Some(s) => s.into(),
        None => format!("{x:.prec$}"),
    }
}

/// `"%.<prec>g" % x` (prec ≥ 1).
pub fn general(x: f64, prec: usize) -> String {
    if let Some(s) = nonfinite(x) {
        return s.into();
    }
    let prec = prec.max(1);
    let e = format!("{:.*e}", prec - 1, x);
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let strip = |m: &str| -> String {
        if m.contains('.') {
            m.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            m.to_string()
        }
    };
    if exp < -4 || exp >= prec as i32 {
        format!(
            "{}e{}{:02}",
            strip(mant),
            if exp < 0 { '-' } else { '+' },
            exp.abs()
        )
    } else {
        strip(&format!("{:.*}", (prec as i32 - 1 - exp) as usize, x))
    }
}

/// Python's `float(s)` for the words the tools print: surrounding blanks
/// allowed, `inf`, `nan` and `infinity` in any case.
pub fn float(s: &str) -> Option<f64> {
    s.trim().parse().ok()
}

/// A JSON string as Python's `json.dumps` writes it (`ensure_ascii`):
/// escapes, `\u00XX` for other control characters and DEL, `\uXXXX` (UTF-16,
/// lowercase hex) beyond ASCII, and bytes that are not UTF-8 as the lone
/// surrogates Python's `surrogateescape` makes of them in `sys.argv`.
pub fn json_str(bytes: &[u8]) -> String {
    let mut s = String::from("\"");
    let unit = |s: &mut String, u: u16| {
        let _ = write!(s, "\\u{u:04x}");
    };
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => s.push_str("\\\""),
                '\\' => s.push_str("\\\\"),
                '\n' => s.push_str("\\n"),
                '\r' => s.push_str("\\r"),
                '\t' => s.push_str("\\t"),
                '\u{8}' => s.push_str("\\b"),
                '\u{c}' => s.push_str("\\f"),
                ' '..='~' => s.push(c),
                _ => {
                    let mut buf = [0u16; 2];
                    for u in c.encode_utf16(&mut buf) {
                        unit(&mut s, *u);
                    }
                }
            }
        }
        for b in chunk.invalid() {
            unit(&mut s, 0xdc00 | u16::from(*b));
        }
    }
    s.push('"');
    s
}

/// A float as `json.dumps` writes it (repr; `NaN`, `Infinity`).
pub fn json_float(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x == f64::INFINITY {
        "Infinity".into()
    } else if x == f64::NEG_INFINITY {
        "-Infinity".into()
    } else {
        repr(x)
    }
}

/// `statistics.median`: the middle value, or the mean of the two middle ones.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// Python's `str.isdigit` for the ASCII words the tools print.
pub fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_as_python() {
        // python3 -c 'print([repr(x) for x in ...])'
        for (x, want) in [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (0.1234, "0.1234"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (65536.0, "65536.0"),
            (1234567890123456.0, "1234567890123456.0"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1e100, "1e+100"),
            (2.2e-308, "2.2e-308"),
            (4200000000.0, "4200000000.0"),
            (1.0 / 3.0, "0.3333333333333333"),
            (8.675309e9, "8675309000.0"),
            (-12.5, "-12.5"),
            // A tie at 17 digits: Python rounds it to even.
            (103462606979301.0 + 0.125, "103462606979301.12"),
            (f64::NAN, "nan"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(repr(x), want, "{x:e}");
        }
    }

    #[test]
    fn printf_as_python() {
        // "%.2f" and "%.4g" of python3, ties to even on the binary value.
        assert_eq!(fixed(0.125, 2), "0.12");
        assert_eq!(fixed(2.675, 2), "2.67");
        assert_eq!(fixed(-0.0, 2), "-0.00");
        assert_eq!(fixed(f64::NAN, 1), "nan");
        for (x, want) in [
            (12345.0, "1.234e+04"),
            (9.123, "9.123"),
            (1234.5, "1234"),
            (1235.5, "1236"),
            (9999.5, "1e+04"),
            (0.5, "0.5"),
            (100.0, "100"),
            (0.0001234567, "0.0001235"),
            (0.00001234567, "1.235e-05"),
            (0.0, "0"),
            (-2.5, "-2.5"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(general(x, 4), want, "{x}");
        }
    }

    #[test]
    fn json_strings_as_python() {
        // json.dumps("...") (ensure_ascii), and sys.argv's surrogateescape.
        assert_eq!(json_str(b""), r#""""#);
        assert_eq!(json_str(b"a \"b\" \\ c\n\t"), r#""a \"b\" \\ c\n\t""#);
        assert_eq!(json_str(b"\x01\x7f"), r#""\u0001\u007f""#);
        assert_eq!(json_str("µs 😀".as_bytes()), r#""\u00b5s \ud83d\ude00""#);
        assert_eq!(json_str(b"x\xffy"), r#""x\udcffy""#);
        assert_eq!(json_float(f64::NAN), "NaN");
        assert_eq!(json_float(-f64::INFINITY), "-Infinity");
    }

    #[test]
    fn median_as_statistics() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
