//! Result tables, printed for a terminal and written as Markdown and CSV.

use std::fmt::Write as _;

/// A table of strings with a header row.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these column names.
    pub fn new<S: AsRef<str>>(headers: &[S]) -> Table {
        Table { headers: headers.iter().map(|h| h.as_ref().to_string()).collect(), rows: Vec::new() }
    }

    /// Appends a row (as many cells as headers).
    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.headers.len(), "a row must have one cell per column");
        self.rows.push(cells);
    }

    fn widths(&self) -> Vec<usize> {
        let mut w: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        w
    }

    /// Aligned columns for a terminal.
    pub fn to_text(&self) -> String {
        let w = self.widths();
        let mut s = String::new();
        let line = |cells: &[String], s: &mut String| {
            let parts: Vec<String> = cells.iter().zip(&w).map(|(c, &w)| format!("{c:>w$}")).collect();
            let _ = writeln!(s, "{}", parts.join("  ").trim_end());
        };
        line(&self.headers, &mut s);
        let _ = writeln!(s, "{}", w.iter().map(|&w| "-".repeat(w)).collect::<Vec<_>>().join("  "));
        for r in &self.rows {
            line(r, &mut s);
        }
        s
    }

    /// A GitHub-flavoured Markdown table (numbers right-aligned).
    pub fn to_markdown(&self) -> String {
        let w = self.widths();
        let mut s = String::new();
        let cells = |cs: &[String]| {
            let parts: Vec<String> = cs.iter().zip(&w).map(|(c, &w)| format!("{c:>w$}")).collect();
            format!("| {} |", parts.join(" | "))
        };
        let _ = writeln!(s, "{}", cells(&self.headers));
        let _ = writeln!(s, "|{}|", w.iter().map(|&w| format!("{}:", "-".repeat(w + 1))).collect::<Vec<_>>().join("|"));
        for r in &self.rows {
            let _ = writeln!(s, "{}", cells(r));
        }
        s
    }

    /// RFC 4180 CSV.
    pub fn to_csv(&self) -> String {
        let esc = |c: &str| {
            if c.contains([',', '"', '\n']) {
                format!("\"{}\"", c.replace('"', "\"\""))
            } else {
                c.to_string()
            }
        };
        let mut s = String::new();
        for r in std::iter::once(&self.headers).chain(&self.rows) {
            let _ = writeln!(s, "{}", r.iter().map(|c| esc(c)).collect::<Vec<_>>().join(","));
        }
        s
    }
}

/// Seconds with three decimals.
pub fn secs(d: f64) -> String {
    format!("{d:.3}")
}

/// A probability in scientific notation (`0` stays `0`).
pub fn prob(p: f64) -> String {
    if p == 0.0 {
        "0".into()
    } else {
        format!("{p:.3e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_three_ways() {
        let mut t = Table::new(&["n", "value"]);
        t.row(vec!["4".into(), "a,b".into()]);
        assert!(t.to_markdown().starts_with("| n | value |\n|--:|------:|\n|"), "{}", t.to_markdown());
        assert_eq!(t.to_csv(), "n,value\n4,\"a,b\"\n");
        assert!(t.to_text().contains("value"));
        assert_eq!(prob(0.0), "0");
        assert_eq!(prob(0.0095), "9.500e-3");
    }
}
