//! JSON text: the one string quoting that the runtime's profile (Chrome trace events) and the
//! isolated device's kernel records write with.

/// `s` as a JSON string literal: quotes, backslashes and control characters escaped; every
/// other character (all of Unicode) kept as it is, which JSON allows.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let v = c as usize;
                out.push_str("\\u00");
                out.push(HEX[v >> 4] as char);
                out.push(HEX[v & 15] as char);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn quotes_escape_what_json_requires_and_keep_the_rest() {
        assert_eq!(quote("a\"b\\\n"), "\"a\\\"b\\\\\\u000a\"");
        assert_eq!(quote("\u{1f}é"), "\"\\u001fé\"");
        assert_eq!(quote(""), "\"\"");
    }
}
