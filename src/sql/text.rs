//! Statement text before parsing: where a script's statements end, and
//! whether a text typed so far is finished.
//!
//! One scanner reads the text for all three questions, so they agree on
//! what is quoted: `'..'` strings, `".."` and `` `..` `` identifiers (a
//! doubled quote inside is the quote itself), `-- ..` line comments and
//! `/* .. */` block comments. A `;` counts only outside all of them.

/// What a scanner finds at the end of a text.
struct Scan {
    /// Statements ended by `;` (trimmed, comments blanked), then the
    /// unterminated rest if it is not empty.
    statements: Vec<String>,
    /// Nothing but whitespace and comments follows the last top-level `;`.
    rest_is_blank: bool,
    /// The text ends inside a quote or a block comment.
    open: bool,
}

fn scan(text: &str) -> Scan {
    let mut statements = Vec::new();
    let mut cur = String::new();
    let mut open = false;
    // Whether anything but whitespace and comments came after the last `;`.
    let mut rest_has_code = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' | '`' => {
                rest_has_code = true;
                cur.push(c);
                open = true;
                while let Some(d) = chars.next() {
                    cur.push(d);
                    if d == c {
                        // A doubled quote is an escaped quote.
                        if chars.peek() == Some(&c) {
                            cur.push(c);
                            chars.next();
                        } else {
                            open = false;
                            break;
                        }
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        cur.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                open = true;
                let mut prev = ' ';
                for d in chars.by_ref() {
                    if prev == '*' && d == '/' {
                        open = false;
                        break;
                    }
                    prev = d;
                }
                cur.push(' ');
            }
            ';' => {
                if !cur.trim().is_empty() {
                    statements.push(cur.trim().to_string());
                }
                cur.clear();
                rest_has_code = false;
            }
            _ => {
                if !c.is_whitespace() {
                    rest_has_code = true;
                }
                cur.push(c)
            }
        }
    }
    if !cur.trim().is_empty() {
        statements.push(cur.trim().to_string());
    }
    Scan {
        statements,
        rest_is_blank: !rest_has_code,
        open,
    }
}

/// Splits a script into statements at top-level `;` (outside quotes and
/// comments). Empty statements are dropped.
pub fn split_statements(text: &str) -> Vec<String> {
    scan(text).statements
}

/// True when `text` holds an unfinished statement (no top-level `;` at the
/// end, or an open quote or comment): the REPL keeps reading lines.
pub fn is_incomplete(text: &str) -> bool {
    let s = scan(text);
    s.open || !s.rest_is_blank
}

/// True when `text` ends inside a quoted string or identifier or a block
/// comment: its next line continues that, and is never a shell command.
pub fn ends_inside_quote(text: &str) -> bool {
    scan(text).open
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_split_outside_quotes_and_comments() {
        let s = split_statements("select ';' as a; -- c; x\nselect \"a;b\" from t /* ; */ ;;\n select 1");
        assert_eq!(s, vec!["select ';' as a", "select \"a;b\" from t", "select 1"]);
        assert!(is_incomplete("select 1"));
        assert!(is_incomplete("select ';"));
        assert!(!is_incomplete("select 1; -- done"));
        assert!(!is_incomplete("select 'it''s';"));
        assert!(!is_incomplete(""));
        assert!(!is_incomplete("  -- only a comment"));
        assert!(is_incomplete("select 1; /* open"));
    }

    #[test]
    fn open_quotes_and_comments_are_seen() {
        assert!(ends_inside_quote("select 'a\n"));
        assert!(ends_inside_quote("select \"col"));
        assert!(ends_inside_quote("select /* note"));
        assert!(!ends_inside_quote("select 'a' -- it's"));
        assert!(!ends_inside_quote("select 'it''s'"));
        assert!(!ends_inside_quote("select 1 /* done */"));
    }
}
