//! Writing an experiment's results: `NAME.md` (parameters, command, table, notes, plot),
//! `NAME.csv` and `NAME.svg`.

use crate::plot::Chart;
use crate::table::Table;
use std::path::{Path, PathBuf};

/// What one experiment produced.
pub struct Report<'a> {
    /// The files' stem.
    pub name: &'a str,
    pub title: &'a str,
    /// The parameters in words.
    pub description: &'a str,
    /// The command that regenerates the files.
    pub command: &'a str,
    pub table: &'a Table,
    pub chart: &'a Chart,
    /// Markdown after the table.
    pub notes: &'a str,
}

impl Report<'_> {
    /// Writes the three files into `dir` (created if needed); returns their paths.
    pub fn write(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let (name, title) = (self.name, self.title);
        let md = dir.join(format!("{name}.md"));
        let csv = dir.join(format!("{name}.csv"));
        let svg = dir.join(format!("{name}.svg"));
        let mut text = format!("# {title}\n\n{}\n\nRegenerate with `{}`.\n\n", self.description, self.command);
        text.push_str(&self.table.to_markdown());
        if !self.notes.is_empty() {
            text.push('\n');
            text.push_str(self.notes);
            text.push('\n');
        }
        text.push_str(&format!("\n![{title}]({name}.svg)\n"));
        std::fs::write(&md, text)?;
        std::fs::write(&csv, self.table.to_csv())?;
        std::fs::write(&svg, self.chart.to_svg().map_err(std::io::Error::other)?)?;
        Ok(vec![md, csv, svg])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::{Series, PALETTE};

    #[test]
    fn writes_markdown_csv_and_svg() {
        let dir = std::env::temp_dir().join(format!("p2pmpi-sim-output-{}", std::process::id()));
        let mut table = Table::new(&["n", "t"]);
        table.row(vec!["4".into(), "1.0".into()]);
        let mut chart = Chart::new("title", "x", "y");
        chart.add(Series::new("s", PALETTE[0], vec![(1.0, 1.0), (2.0, 3.0)]));
        let r =
            Report { name: "x", title: "T", description: "d", command: "c", table: &table, chart: &chart, notes: "" };
        let files = r.write(&dir).unwrap();
        assert_eq!(files.len(), 3);
        let md = std::fs::read_to_string(&files[0]).unwrap();
        assert!(md.contains("| n |") && md.contains("Regenerate with `c`") && md.contains("![T](x.svg)"));
        assert_eq!(std::fs::read_to_string(&files[1]).unwrap(), "n,t\n4,1.0\n");
        assert!(std::fs::read_to_string(&files[2]).unwrap().starts_with("<svg"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
