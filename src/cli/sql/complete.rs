//! Tab completion in the SQL shell: what the word under the cursor may
//! become.
//!
//! Invariants: completion only reads names (tables, series, their
//! columns), never runs a query or touches storage; candidates come
//! sorted and without duplicates; keywords keep the case the word was
//! typed in; a name that SQL would fold or misread is offered in double
//! quotes.

use std::collections::BTreeSet;

/// The names completion may offer, as the shell finds them when Tab is
/// pressed.
pub(super) trait Names {
    /// Tables and series.
    fn tables(&self) -> Vec<String>;
    /// The columns of a table or series (empty: none of that name).
    fn columns(&self, table: &str) -> Vec<String>;
}

/// Keywords offered anywhere in a statement.
const KEYWORDS: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "ORDER",
    "HAVING",
    "LIMIT",
    "OFFSET",
    "AND",
    "OR",
    "NOT",
    "IN",
    "IS",
    "NULL",
    "LIKE",
    "ILIKE",
    "BETWEEN",
    "AS",
    "ON",
    "JOIN",
    "LEFT",
    "RIGHT",
    "INNER",
    "OUTER",
    "FULL",
    "CROSS",
    "UNION",
    "ALL",
    "DISTINCT",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "ASC",
    "DESC",
    "WITH",
    "INSERT",
    "INTO",
    "VALUES",
    "UPDATE",
    "SET",
    "DELETE",
    "CREATE",
    "TABLE",
    "ALTER",
    "ADD",
    "COLUMN",
    "DROP",
    "PRIMARY",
    "KEY",
    "SHOW",
    "TABLES",
    "DESCRIBE",
    "EXPLAIN",
    "ANALYZE",
    "COUNT",
    "SUM",
    "AVG",
    "MIN",
    "MAX",
    "CAST",
    "TRUE",
    "FALSE",
    "BIGINT",
    "DOUBLE",
    "VARCHAR",
    "BOOLEAN",
    "BYTEA",
    "TIMESTAMP",
    "EXISTS",
    "OVER",
    "PARTITION",
    "COPY",
    "EXTERNAL",
    "STORED",
    "LOCATION",
    "cellar_versions",
    "cellar_as_of",
];

/// Words after which a table name comes.
const BEFORE_TABLE: &[&str] = &["FROM", "JOIN", "INTO", "UPDATE", "TABLE", "DESCRIBE", "\\D"];

/// Completes the word that ends at `pos` of `line`; `pending`: the lines
/// of the statement typed before this one. Returns where the word starts
/// and its candidates.
pub(super) fn complete(pending: &str, line: &str, pos: usize, names: &dyn Names) -> (usize, Vec<String>) {
    let before = &line[..pos];
    let start = before
        .char_indices()
        .rev()
        .take_while(|(_, c)| is_word_char(*c))
        .last()
        .map_or(pos, |(i, _)| i);
    let word = &before[start..];
    let head = &before[..start];
    // A shell command: `\` first on a line, or `.` where a statement starts.
    let lead = before.trim_start();
    if let Some(sigil) = lead.chars().next()
        && (sigil == '\\' || (sigil == '.' && pending.trim().is_empty()))
        && lead[1..].chars().all(is_word_char)
    {
        let mut found: Vec<String> = super::meta::NAMES
            .iter()
            .filter(|n| n.starts_with(sigil) && n.starts_with(lead))
            .map(|n| n.to_string())
            .collect();
        found.sort();
        return (before.len() - lead.len(), found);
    }
    // `t.` : the columns of table t.
    if let Some(qualifier) = head.strip_suffix('.') {
        let table: String = qualifier.chars().rev().take_while(|c| is_word_char(*c)).collect();
        let table: String = table.chars().rev().collect();
        let cols = names.columns(&table);
        return (start, matching(cols, word));
    }
    let previous = head
        .split_whitespace()
        .last()
        .map(|w| w.to_ascii_uppercase())
        .unwrap_or_default();
    let tables = names.tables();
    if BEFORE_TABLE.contains(&previous.as_str()) {
        return (start, matching(tables.iter().map(|t| quoted(t)).collect(), word));
    }
    if word.is_empty() {
        // Tab on nothing would list every keyword: offer nothing.
        return (start, Vec::new());
    }
    // Columns of the tables the statement names, then keywords and tables.
    let text = format!("{pending}\n{line}");
    let mut found: BTreeSet<String> = BTreeSet::new();
    for t in tables.iter().filter(|t| mentions(&text, t)) {
        found.extend(matching(names.columns(t).iter().map(|c| quoted(c)).collect(), word));
    }
    let lower = word.chars().any(|c| c.is_ascii_lowercase()) && !word.chars().any(|c| c.is_ascii_uppercase());
    for k in KEYWORDS {
        if k.len() > word.len() && k.to_ascii_lowercase().starts_with(&word.to_ascii_lowercase()) {
            found.insert(if lower || k.starts_with("cellar") {
                k.to_ascii_lowercase()
            } else {
                k.to_string()
            });
        }
    }
    found.extend(matching(tables.iter().map(|t| quoted(t)).collect(), word));
    (start, found.into_iter().collect())
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The candidates that start with `word` (case aside), sorted.
fn matching(candidates: Vec<String>, word: &str) -> Vec<String> {
    let w = word.to_lowercase();
    let mut out: Vec<String> = candidates
        .into_iter()
        .filter(|c| c.trim_start_matches('"').to_lowercase().starts_with(&w))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Whether `text` names table `t` as a whole word.
fn mentions(text: &str, t: &str) -> bool {
    text.split(|c: char| !is_word_char(c))
        .any(|w| w.eq_ignore_ascii_case(t))
}

/// A name as SQL must spell it: plain when it is a lowercase identifier,
/// else in double quotes.
fn quoted(name: &str) -> String {
    let plain = name.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;

    impl Names for Fixed {
        fn tables(&self) -> Vec<String> {
            vec!["orders".into(), "order_items".into(), "Events".into(), "metrics".into()]
        }
        fn columns(&self, table: &str) -> Vec<String> {
            match table {
                "orders" => vec!["card_id".into(), "amount".into(), "category".into()],
                "metrics" => vec!["device".into(), "ts".into()],
                _ => vec![],
            }
        }
    }

    fn done(pending: &str, line: &str) -> Vec<String> {
        complete(pending, line, line.len(), &Fixed).1
    }

    #[test]
    fn keywords_keep_the_typed_case() {
        assert_eq!(done("", "SEL"), vec!["SELECT"]);
        assert_eq!(done("", "sel"), vec!["select"]);
        assert_eq!(done("", "select * fr"), vec!["from"]);
        assert!(done("", "select cellar_v").contains(&"cellar_versions".to_string()));
    }

    #[test]
    fn tables_after_from_and_join() {
        assert_eq!(done("", "select * from ord"), vec!["order_items", "orders"]);
        assert_eq!(done("", "SELECT * FROM orders o JOIN me"), vec!["metrics"]);
        assert_eq!(done("", "select * from Ev"), vec!["\"Events\""]);
        assert_eq!(done("", "\\d met"), vec!["metrics"]);
        assert_eq!(complete("", "select * from ", 14, &Fixed).1.len(), 4);
    }

    #[test]
    fn columns_of_the_tables_named() {
        assert_eq!(done("", "select am"), Vec::<String>::new());
        // The cursor in the middle: the table is named after it.
        let line = "select am from orders";
        assert_eq!(complete("", line, 9, &Fixed), (7, vec!["amount".to_string()]));
        // Named on an earlier line of the statement.
        assert_eq!(done("select *\nfrom metrics", "where dev"), vec!["device"]);
        assert_eq!(done("", "select orders.ca"), vec!["card_id", "category"]);
        let cands = done("", "select c from orders where ca");
        assert_eq!(cands, vec!["card_id", "case", "cast", "category"]);
    }

    #[test]
    fn shell_commands_at_line_start() {
        assert_eq!(done("", "\\ti"), vec!["\\timing"]);
        assert_eq!(done("", ".ta"), vec![".tables"]);
        assert_eq!(done("", "\\d"), vec!["\\d", "\\dt"]);
        // `.` names only where a statement starts; `\` ones anywhere.
        assert_eq!(done("select 1", ".ta"), Vec::<String>::new());
        assert_eq!(done("select 1", "\\tim"), vec!["\\timing"]);
    }
}
