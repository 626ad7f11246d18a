//! The report's charts as inline SVG, drawn with `plotters`' SVG backend (which escapes every text it writes).

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Colour of correct (exact) bars.
const DARK: RGBColor = RGBColor(37, 99, 235);
/// Colour of type-correct bars, behind the exact ones.
const LIGHT: RGBColor = RGBColor(191, 219, 254);
/// Colour of counts (errors, histograms).
const WARM: RGBColor = RGBColor(234, 88, 12);

type DrawResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Pixels per character of an 11 px label, generous so that a label is never wider than its room.
const LABEL_CHAR_PX: u32 = 7;

/// The room (pixels) a column of `labels` needs across its text: the longest label plus the gap to the axis.
fn label_room(labels: &[String]) -> u32 {
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(1) as u32;
    LABEL_CHAR_PX * longest + 16
}

/// Labels turned a quarter clockwise, each starting just below the plot at `at(i)` (backend pixels: the centre of
/// its column on the plot's bottom edge), so the whole label lies in the label area below. Plotters' own turned
/// axis labels are centred on the axis, half of each under the plot, where bars and cells cover it.
fn turned_labels(
    root: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    labels: &[String],
    at: impl Fn(usize) -> (i32, i32),
) -> DrawResult<()> {
    let style = ("sans-serif", 11)
        .into_font()
        .transform(FontTransform::Rotate90)
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (i, label) in labels.iter().enumerate() {
        let (x, y) = at(i);
        root.draw(&Text::new(label.clone(), (x, y + 8), style.clone()))?;
    }
    Ok(())
}

/// The discrete range of `n` categories; at least two slots, since a one-value range has no width to map.
fn slots(n: usize) -> std::ops::Range<usize> {
    0..n.max(2) - 1
}

/// A category bar chart: one bar per label, `back` (optional, e.g. type accuracy) drawn behind `front`.
pub(crate) struct Bars<'a> {
    /// Chart title.
    pub title: &'a str,
    /// Category labels.
    pub labels: &'a [String],
    /// Heights of the front bars.
    pub front: &'a [f64],
    /// Heights of the bars behind (`≥ front`), if any.
    pub back: Option<&'a [f64]>,
    /// Top of the y axis.
    pub y_max: f64,
    /// Y axis description.
    pub y_desc: &'a str,
    /// Colour of the front bars.
    pub color: RGBColor,
}

fn svg(
    width: u32,
    height: u32,
    draw: impl FnOnce(&DrawingArea<SVGBackend, plotters::coord::Shift>) -> DrawResult<()>,
) -> String {
    let mut buf = String::new();
    let outcome = {
        let root = SVGBackend::with_string(&mut buf, (width, height)).into_drawing_area();
        let r = root
            .fill(&WHITE)
            .map_err(Into::into)
            .and_then(|_| draw(&root));
        r.and_then(|_| root.present().map_err(Into::into))
    };
    match outcome {
        Ok(()) => buf,
        Err(e) => format!(
            "<p class=\"note\">chart not drawn: {}</p>",
            super::escape::html(&e.to_string())
        ),
    }
}

/// Draw a bar chart.
pub(crate) fn bars(b: &Bars<'_>) -> String {
    let n = b.labels.len().max(1);
    let slot = (label_room(b.labels) - 6).max(36);
    let rotate = n as u32 * slot > 1000;
    let width = (n as u32 * if rotate { 36 } else { slot } + 70).clamp(420, 1000);
    let label_area = if rotate { label_room(b.labels) } else { 30 };
    let height = 270 + label_area;
    svg(width, height, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(b.title, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(label_area)
            .y_label_area_size(44)
            .build_cartesian_2d(slots(n).into_segmented(), 0.0..b.y_max.max(1e-9))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_style(("sans-serif", 11).into_font())
            .x_label_formatter(&|v| match v {
                // Turned labels are drawn below, after the bars.
                SegmentValue::CenterOf(i) if !rotate => {
                    b.labels.get(*i).cloned().unwrap_or_default()
                }
                _ => String::new(),
            })
            .y_desc(b.y_desc)
            .draw()?;
        let rect = |i: usize, v: f64, c: RGBColor| {
            let mut r = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), v),
                ],
                c.filled(),
            );
            r.set_margin(0, 0, 3, 3);
            r
        };
        if let Some(back) = b.back {
            chart.draw_series(back.iter().enumerate().map(|(i, &v)| rect(i, v, LIGHT)))?;
        }
        chart.draw_series(
            b.front
                .iter()
                .enumerate()
                .map(|(i, &v)| rect(i, v, b.color)),
        )?;
        if rotate {
            turned_labels(root, b.labels, |i| {
                chart.backend_coord(&(SegmentValue::CenterOf(i), 0.0))
            })?;
        }
        Ok(())
    })
}

/// Bar chart of percentages with the type accuracy behind the exact accuracy.
pub(crate) fn accuracy_bars(
    title: &str,
    labels: &[String],
    exact: &[f64],
    typed: Option<&[f64]>,
) -> String {
    bars(&Bars {
        title,
        labels,
        front: exact,
        back: typed,
        y_max: 100.0,
        y_desc: "%",
        color: DARK,
    })
}

/// Bar chart of counts.
pub(crate) fn count_bars(title: &str, labels: &[String], counts: &[f64]) -> String {
    let max = counts.iter().cloned().fold(1.0, f64::max);
    bars(&Bars {
        title,
        labels,
        front: counts,
        back: None,
        y_max: max * 1.1,
        y_desc: "steps",
        color: WARM,
    })
}

/// A heat map of `cells[row][col]` counts with row and column labels (the type confusion).
pub(crate) fn heatmap(
    title: &str,
    rows: &[String],
    cols: &[String],
    cells: &[Vec<usize>],
) -> String {
    let (nr, nc) = (rows.len().max(1), cols.len().max(1));
    let max = cells.iter().flatten().copied().max().unwrap_or(1).max(1) as f64;
    let (col_room, row_room) = (label_room(cols), label_room(rows));
    let (width, height) = (
        row_room + 20 + 52 * nc as u32,
        col_room + 50 + 30 * nr as u32,
    );
    svg(width, height, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(col_room)
            .y_label_area_size(row_room)
            .build_cartesian_2d(slots(nc).into_segmented(), slots(nr).into_segmented())?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(nc)
            .y_labels(nr)
            // Column labels are drawn turned below, after the cells.
            .x_label_formatter(&|_| String::new())
            .y_label_formatter(&|v| match v {
                // Row 0 is drawn at the top.
                SegmentValue::CenterOf(i) => nr
                    .checked_sub(1 + i)
                    .and_then(|k| rows.get(k))
                    .cloned()
                    .unwrap_or_default(),
                _ => String::new(),
            })
            .draw()?;
        for (r, row) in cells.iter().enumerate() {
            let r = nr - 1 - r;
            for (c, &count) in row.iter().enumerate() {
                let t = count as f64 / max;
                let shade = |lo: u8, hi: u8| (lo as f64 + (hi as f64 - lo as f64) * t) as u8;
                let color = RGBColor(shade(248, 30), shade(250, 64), shade(252, 175));
                let cell = [
                    (SegmentValue::Exact(c), SegmentValue::Exact(r)),
                    (SegmentValue::Exact(c + 1), SegmentValue::Exact(r + 1)),
                ];
                chart.draw_series(std::iter::once(Rectangle::new(cell, color.filled())))?;
                if count > 0 {
                    let ink = if t > 0.5 { WHITE } else { BLACK };
                    let style = ("sans-serif", 12)
                        .into_font()
                        .color(&ink)
                        .pos(Pos::new(HPos::Center, VPos::Center));
                    let at = (SegmentValue::CenterOf(c), SegmentValue::CenterOf(r));
                    chart.draw_series(std::iter::once(Text::new(count.to_string(), at, style)))?;
                }
            }
        }
        turned_labels(root, cols, |c| {
            chart.backend_coord(&(SegmentValue::CenterOf(c), SegmentValue::Exact(0)))
        })?;
        Ok(())
    })
}

/// A histogram of non-negative integers in at most 20 equal bins from the smallest to the largest value.
pub(crate) fn histogram(title: &str, values: &[u64], x_desc: &str) -> String {
    let min = values.iter().copied().min().unwrap_or(0);
    let max = values.iter().copied().max().unwrap_or(0);
    let width = (max - min + 1).div_ceil(20).max(1);
    let bins = ((max - min) / width + 1) as usize;
    let mut counts = vec![0u32; bins];
    for &v in values {
        counts[((v - min) / width) as usize] += 1;
    }
    let top = counts.iter().copied().max().unwrap_or(1).max(1);
    svg(560, 300, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(44)
            .y_label_area_size(44)
            .build_cartesian_2d(slots(bins).into_segmented(), 0u32..top + top / 10 + 1)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(bins.min(10))
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                    (min + *i as u64 * width).to_string()
                }
                SegmentValue::Last => String::new(),
            })
            .x_desc(x_desc)
            .y_desc("steps")
            .draw()?;
        // One rectangle per bin in bin order (plotters' `Histogram` sums its data in a hash map and draws the bars
        // in that map's order, which differs between runs: the report would not be the same file twice).
        chart.draw_series(counts.iter().enumerate().map(|(i, &c)| {
            let mut r = Rectangle::new(
                [(SegmentValue::Exact(i), 0), (SegmentValue::Exact(i + 1), c)],
                WARM.filled(),
            );
            r.set_margin(0, 0, 1, 1);
            r
        }))?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The number after `name="` in an SVG tag.
    fn attr(tag: &str, name: &str) -> Option<f64> {
        let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        tag[at..].split('"').next()?.parse().ok()
    }

    /// Each `<text>` of a drawing: its opening tag and its text.
    fn texts(svg: &str) -> Vec<(&str, &str)> {
        svg.split("<text")
            .skip(1)
            .map(|t| {
                let (tag, rest) = t.split_once('>').unwrap();
                (tag, rest.split("</text>").next().unwrap().trim())
            })
            .collect()
    }

    #[test]
    fn a_histogram_is_the_same_drawing_each_time() {
        let values: Vec<u64> = (0..400).map(|i| 700 + (i * 37) % 600).collect();
        let first = histogram("Prompt size per step", &values, "tokens");
        assert!(first.contains("<rect"), "{first}");
        for _ in 0..8 {
            assert_eq!(histogram("Prompt size per step", &values, "tokens"), first);
        }
    }

    #[test]
    fn every_heat_map_column_label_lies_whole_below_the_cells() {
        let names = ["click", "long_press", "system_button", "terminate", "swipe"];
        let labels: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let cells: Vec<Vec<usize>> = (0..names.len())
            .map(|r| (0..names.len()).map(|c| (r * 3 + c) % 4).collect())
            .collect();
        let svg = heatmap("Type confusion", &labels, &labels, &cells);
        let height = attr(&svg, "height").unwrap();
        let cells_bottom = svg
            .split("<rect")
            .skip(1)
            .filter_map(|r| Some(attr(r, "y")? + attr(r, "height")?))
            .filter(|&bottom| bottom < height - 1.0)
            .fold(0.0, f64::max);
        for name in names {
            let (tag, _) = texts(&svg)
                .into_iter()
                .find(|(tag, text)| *text == name && tag.contains("rotate(90"))
                .unwrap_or_else(|| panic!("no turned label {name} in {svg}"));
            assert!(tag.contains("text-anchor=\"start\""), "{tag}");
            let y = attr(tag, "y").unwrap();
            assert!(
                y >= cells_bottom,
                "{name} starts at {y}, above the cells' bottom {cells_bottom}"
            );
            let end = y + (LABEL_CHAR_PX * name.len() as u32) as f64;
            assert!(
                end <= height,
                "{name} ends at {end}, below the drawing's {height}"
            );
        }
    }
}
