//! Text made safe for HTML and XML: element content and attribute values.
//!
//! One function serves both: the five characters with meaning in markup
//! become entity references valid in HTML and XML alike (`'` as `&#39;`,
//! which XML 1.0 and HTML both read), and the characters XML 1.0 cannot
//! carry at all (most control characters, U+FFFE, U+FFFF) become U+FFFD, so
//! a frame name or file name from any snapshot gives a well-formed SVG.
//! Tabs and line breaks become spaces: in markup they would only be
//! collapsed; [`markup_lines`] keeps line breaks, for `title` tooltips.

/// `s` escaped for HTML or XML content and attribute values.
pub fn markup(s: &str) -> String {
    escape(s, false)
}

/// [`markup`] that keeps line breaks (tooltips read them as new lines).
pub fn markup_lines(s: &str) -> String {
    escape(s, true)
}

fn escape(s: &str, keep_lines: bool) -> String {
    let mut o = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            '\n' if keep_lines => o.push('\n'),
            '\t' | '\n' | '\r' => o.push(' '),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => o.push('\u{FFFD}'),
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_is_inert_in_html_and_well_formed_in_xml() {
        assert_eq!(
            markup("<script>alert(\"x\")</script> & 'y'"),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        assert_eq!(markup("a\u{7}b\u{FFFF}c\td\ne"), "a\u{FFFD}b\u{FFFD}c d e");
        assert_eq!(markup_lines("a\nb\tc\r"), "a\nb c ");
        assert_eq!(markup("plain ünïcode"), "plain ünïcode");
    }
}
