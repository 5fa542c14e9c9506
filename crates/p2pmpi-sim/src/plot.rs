//! SVG line charts with `plotters`' SVG backend alone: text is written as SVG `<text>`
//! elements and measured by plotters' built-in approximation, so no font library
//! (fontconfig, FreeType) is linked.

use plotters::coord::Shift;
use plotters::prelude::*;

/// Colours of the series, in order.
pub const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// One curve.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Vertical ranges `(x, low, high)` drawn as whiskers (e.g. first to last detection).
    pub ranges: Vec<(f64, f64, f64)>,
    pub color: RGBColor,
    pub dashed: bool,
    pub markers: bool,
}

impl Series {
    /// A solid line with markers.
    pub fn new(name: impl Into<String>, color: RGBColor, points: Vec<(f64, f64)>) -> Series {
        Series { name: name.into(), points, ranges: Vec::new(), color, dashed: false, markers: true }
    }

    /// Dashed, without markers (a theoretical curve).
    pub fn dashed(mut self) -> Series {
        self.dashed = true;
        self.markers = false;
        self
    }

    /// Markers only, no line.
    pub fn markers_only(mut self) -> Series {
        self.markers = true;
        self.dashed = false;
        self.name.push(' ');
        self
    }
}

/// A chart.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// The x values are process counts: plot them on a log2 axis labelled with the counts.
    pub x_log2: bool,
    /// Logarithmic y axis (points ≤ 0 are left out).
    pub y_log: bool,
    pub series: Vec<Series>,
    /// Points of these series are drawn without connecting lines.
    pub scatter: Vec<bool>,
    /// Where the legend goes.
    pub legend_upper_right: bool,
}

impl Chart {
    /// An empty chart.
    pub fn new(title: impl Into<String>, x_label: impl Into<String>, y_label: impl Into<String>) -> Chart {
        Chart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x_log2: false,
            y_log: false,
            series: Vec::new(),
            scatter: Vec::new(),
            legend_upper_right: false,
        }
    }

    /// Adds a curve.
    pub fn add(&mut self, s: Series) {
        self.series.push(s);
        self.scatter.push(false);
    }

    /// Adds points drawn without a line.
    pub fn add_scatter(&mut self, s: Series) {
        self.series.push(s);
        self.scatter.push(true);
    }

    /// Renders the chart as an SVG document.
    pub fn to_svg(&self) -> Result<String, String> {
        let mut buf = String::new();
        {
            let root = SVGBackend::with_string(&mut buf, (900, 560)).into_drawing_area();
            self.draw(&root).map_err(|e| format!("plot {:?}: {e}", self.title))?;
            root.present().map_err(|e| format!("plot {:?}: {e}", self.title))?;
        }
        Ok(buf)
    }

    fn tx(&self, x: f64) -> f64 {
        if self.x_log2 {
            x.log2()
        } else {
            x
        }
    }

    /// Log axes are drawn as linear axes of the logarithm, labelled with the values.
    fn ty(&self, y: f64) -> f64 {
        if self.y_log {
            y.log10()
        } else {
            y
        }
    }

    fn keep(&self, y: f64) -> bool {
        y.is_finite() && (!self.y_log || y > 0.0)
    }

    fn bounds(&self) -> ((f64, f64), (f64, f64)) {
        let (mut x0, mut x1, mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY);
        for s in &self.series {
            let ys = s.points.iter().copied().chain(s.ranges.iter().flat_map(|&(x, l, h)| [(x, l), (x, h)]));
            for (x, y) in ys {
                if !self.keep(y) {
                    continue;
                }
                let (x, y) = (self.tx(x), self.ty(y));
                x0 = x0.min(x);
                x1 = x1.max(x);
                y0 = y0.min(y);
                y1 = y1.max(y);
            }
        }
        if !x0.is_finite() {
            return ((0.0, 1.0), (0.0, 1.0));
        }
        let dx = (x1 - x0).max(1e-9);
        let xr = if self.x_log2 { (x0 - 0.3, x1 + 0.3) } else { (x0 - 0.05 * dx, x1 + 0.05 * dx) };
        let yr = if self.y_log {
            (y0.floor() - 0.2, (y1 + 0.2).ceil().max(y0.floor() + 1.0) + 0.2)
        } else {
            (0.0_f64.min(y0), y1 * 1.1 + 1e-9)
        };
        (xr, yr)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), Box<dyn std::error::Error + '_>>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE)?;
        let ((x0, x1), (y0, y1)) = self.bounds();
        let x_fmt = |v: &f64| {
            if self.x_log2 {
                format!("{}", 2f64.powf(*v).round())
            } else {
                format!("{v}")
            }
        };
        let decades = (y1 - y0).ceil() as i64;
        let y_step = if decades > 12 { 2 } else { 1 };
        let y_fmt = |v: &f64| {
            if !self.y_log {
                return format!("{v}");
            }
            let e = v.round();
            if (v - e).abs() > 1e-6 || (e as i64).rem_euclid(y_step) != 0 {
                String::new()
            } else if (-2.0..=3.0).contains(&e) {
                format!("{}", 10f64.powi(e as i32))
            } else {
                format!("1e{e}")
            }
        };
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(80)
            .build_cartesian_2d(x0..x1, y0..y1)?;
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .label_style(("sans-serif", 14))
            .light_line_style(RGBColor(242, 242, 242));
        if self.x_log2 {
            mesh.x_labels((x1 - x0).ceil() as usize + 1);
        }
        if self.y_log {
            // Key points at every integer (decade); plotters picks "nice" values, so ask for
            // one per decade.
            mesh.y_labels(decades as usize + 1);
        }
        mesh.draw()?;
        for (s, &scatter) in self.series.iter().zip(&self.scatter) {
            let pts: Vec<(f64, f64)> =
                s.points.iter().filter(|p| self.keep(p.1)).map(|&(x, y)| (self.tx(x), self.ty(y))).collect();
            // Lines break where a point cannot be drawn (0 on a log axis).
            let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
            for &(x, y) in &s.points {
                if self.keep(y) {
                    runs.last_mut().expect("one run").push((self.tx(x), self.ty(y)));
                } else if !runs.last().expect("one run").is_empty() {
                    runs.push(Vec::new());
                }
            }
            let color = s.color;
            let style = color.stroke_width(2);
            if scatter {
                chart
                    .draw_series(pts.iter().map(|&p| Cross::new(p, 5, color.stroke_width(2))))?
                    .label(&s.name)
                    .legend(move |(x, y)| Cross::new((x + 10, y), 5, color.stroke_width(2)));
            } else {
                if pts.is_empty() {
                    // Keep the series in the legend even when nothing can be drawn.
                    runs = vec![Vec::new()];
                }
                let none = if pts.is_empty() { " (none: all 0)" } else { "" };
                let mut first = true;
                for run in runs.iter().filter(|r| !r.is_empty() || pts.is_empty()) {
                    let anno = if s.dashed {
                        chart.draw_series(DashedLineSeries::new(run.clone(), 8, 5, style))?
                    } else {
                        chart.draw_series(LineSeries::new(run.clone(), style))?
                    };
                    if std::mem::take(&mut first) {
                        let dashed = s.dashed;
                        anno.label(format!("{}{none}", s.name)).legend(move |(x, y)| {
                            if dashed {
                                EmptyElement::at((x, y))
                                    + PathElement::new(vec![(0, 0), (7, 0)], style)
                                    + PathElement::new(vec![(11, 0), (20, 0)], style)
                            } else {
                                EmptyElement::at((x, y))
                                    + PathElement::new(vec![(0, 0), (20, 0)], style)
                                    + PathElement::new(vec![(10, 0), (10, 0)], style)
                            }
                        });
                    }
                }
                if s.markers {
                    chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
                }
            }
            for &(x, lo, hi) in &s.ranges {
                if self.keep(lo) && self.keep(hi) {
                    let (x, lo, hi) = (self.tx(x), self.ty(lo), self.ty(hi));
                    let w = (x1 - x0) * 0.006;
                    let line = |a: (f64, f64), b: (f64, f64)| PathElement::new(vec![a, b], color.stroke_width(1));
                    chart.draw_series([
                        line((x, lo), (x, hi)),
                        line((x - w, lo), (x + w, lo)),
                        line((x - w, hi), (x + w, hi)),
                    ])?;
                }
            }
        }
        chart
            .configure_series_labels()
            .position(if self.legend_upper_right {
                SeriesLabelPosition::UpperRight
            } else {
                SeriesLabelPosition::UpperLeft
            })
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_an_svg_with_text_and_no_font_library() {
        let mut c = Chart::new("t", "n", "seconds");
        c.x_log2 = true;
        c.add(Series::new("a", PALETTE[0], vec![(4.0, 1.0), (8.0, 2.0), (16.0, 3.0)]));
        c.add(Series::new("theory", PALETTE[1], vec![(4.0, 1.5), (16.0, 3.5)]).dashed());
        c.add_scatter(Series::new("x", PALETTE[2], vec![(8.0, 2.5)]));
        let svg = c.to_svg().unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..100.min(svg.len())]);
        assert!(svg.contains("<text") && svg.contains("seconds"));
        let mut l = Chart::new("log", "n", "p");
        l.y_log = true;
        l.add(Series::new("p", PALETTE[0], vec![(4.0, 1e-2), (8.0, 1e-5), (16.0, 0.0)]));
        assert!(l.to_svg().unwrap().contains("<svg"));
    }
}
