//! Text of a double the way Java (`Double.toString`, hence Jackson) and
//! Python (`repr`) write it, both from the shortest round-trip digits.

/// The decimal digits (no leading zeros) and the exponent of the first digit:
/// `v = 0.d1d2… × 10^(exp+1)`, i.e. `d1.d2… × 10^exp`.
struct Decimal {
    digits: String,
    exp: i32,
}

/// Shortest digits that read back as `v` (finite, not zero).
fn shortest(v: f64) -> Decimal {
    // `{:e}` prints the shortest round-trip digits: "1.2345e-5", "1e10".
    split(&format!("{:e}", v.abs()))
}

fn split(text: &str) -> Decimal {
    let (mantissa, exp) = text.split_once('e').expect("`{:e}` always has an exponent");
    Decimal {
        digits: mantissa.replace('.', ""),
        exp: exp.parse().expect("`{:e}` writes an integer exponent"),
    }
}

fn push_fixed(out: &mut String, d: &Decimal) {
    let digits = d.digits.as_bytes();
    if d.exp < 0 {
        out.push_str("0.");
        for _ in 0..(-d.exp - 1) {
            out.push('0');
        }
        out.push_str(&d.digits);
        return;
    }
    let int_len = d.exp as usize + 1;
    if digits.len() <= int_len {
        out.push_str(&d.digits);
        for _ in digits.len()..int_len {
            out.push('0');
        }
        out.push_str(".0");
    } else {
        out.push_str(&d.digits[..int_len]);
        out.push('.');
        out.push_str(&d.digits[int_len..]);
    }
}

/// Java's `Double.toString` (JDK 19 and later: the shortest digits, at least
/// two of them, picked closest to the exact value): `1.0E10`, `0.001`,
/// `1.0E-4`, `123.45`, `-0.0`; `NaN`, `Infinity`, `-Infinity`.
pub fn java_double(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_owned();
    }
    let mut out = String::new();
    if v.is_sign_negative() {
        out.push('-');
    }
    if v.is_infinite() {
        out.push_str("Infinity");
        return out;
    }
    if v == 0.0 {
        out.push_str("0.0");
        return out;
    }
    let mut d = shortest(v);
    if d.digits.len() == 1 {
        // Java writes two digits; of those, the closest to the exact value
        // (only differs from "d.0" for the smallest subnormals: 4.9E-324).
        d = split(&format!("{:.1e}", v.abs()));
        if d.digits.ends_with('0') {
            d.digits.pop();
        }
    }
    let a = v.abs();
    if (1e-3..1e7).contains(&a) {
        push_fixed(&mut out, &d);
    } else {
        out.push_str(&d.digits[..1]);
        out.push('.');
        if d.digits.len() == 1 {
            out.push('0');
        } else {
            out.push_str(&d.digits[1..]);
        }
        out.push('E');
        out.push_str(&d.exp.to_string());
    }
    out
}

/// Python's `repr(float)`: `10000000000.0`, `1e+16`, `1.5e-05`, `0.0001`,
/// `nan`, `inf`.
pub fn python_float(v: f64) -> String {
    if v.is_nan() {
        return "nan".to_owned();
    }
    let mut out = String::new();
    if v.is_sign_negative() {
        out.push('-');
    }
    if v.is_infinite() {
        out.push_str("inf");
        return out;
    }
    if v == 0.0 {
        out.push_str("0.0");
        return out;
    }
    let d = shortest(v);
    if (-4..16).contains(&d.exp) {
        push_fixed(&mut out, &d);
    } else {
        out.push_str(&d.digits[..1]);
        if d.digits.len() > 1 {
            out.push('.');
            out.push_str(&d.digits[1..]);
        }
        out.push('e');
        out.push(if d.exp < 0 { '-' } else { '+' });
        let e = d.exp.unsigned_abs();
        if e < 10 {
            out.push('0');
        }
        out.push_str(&e.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java() {
        for (v, s) in [
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (123.45, "123.45"),
            (1e7, "1.0E7"),
            (9_999_999.0, "9999999.0"),
            (1e-3, "0.001"),
            (9.99e-4, "9.99E-4"),
            (1e10, "1.0E10"),
            (1.234_5e-5, "1.2345E-5"),
            (f64::MIN_POSITIVE * f64::EPSILON, "4.9E-324"),
            (f64::MAX, "1.7976931348623157E308"),
            (0.1 + 0.2, "0.30000000000000004"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
            (f64::NAN, "NaN"),
        ] {
            assert_eq!(java_double(v), s, "{v:e}");
        }
    }

    #[test]
    fn python() {
        for (v, s) in [
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (1e10, "10000000000.0"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e-5, "1.5e-05"),
            (1e-4, "0.0001"),
            (123.456, "123.456"),
            (f64::MIN_POSITIVE * f64::EPSILON, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::NAN, "nan"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(python_float(v), s, "{v:e}");
        }
    }
}
