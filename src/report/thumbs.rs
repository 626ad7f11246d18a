//! Downscaled JPEG copies of the screenshots beside a report page (`report/`), made in parallel.
//!
//! A thumbnail's name is a hash of the screenshot's path inside the benchmark, so any file name (spaces,
//! non-ASCII) becomes a plain ASCII URL; an existing thumbnail newer than its screenshot is reused.

use std::collections::{BTreeSet, HashMap};
use std::io::BufWriter;
use std::path::Path;

use image::codecs::jpeg::JpegEncoder;
use rayon::prelude::*;
use sha2::{Digest, Sha256};

use super::ReportError;

/// Width of the thumbnails in pixels (narrower screenshots keep their size).
pub const THUMB_WIDTH: u32 = 400;
/// JPEG quality of the thumbnails.
const QUALITY: u8 = 75;
/// The folder of the thumbnails, beside the page.
pub const THUMB_DIR: &str = "report";

/// The thumbnail file name of a screenshot path.
fn thumb_name(image: &str) -> String {
    let digest = Sha256::digest(image.as_bytes());
    let hex: String = digest[..10].iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex}.jpg")
}

fn is_fresh(thumb: &Path, source: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    matches!((modified(thumb), modified(source)), (Some(t), Some(s)) if t >= s)
}

fn make_one(source: &Path, thumb: &Path) -> Result<(), String> {
    if is_fresh(thumb, source) {
        return Ok(());
    }
    let img = image::ImageReader::open(source)
        .and_then(|r| r.with_guessed_format())
        .map_err(|e| e.to_string())?
        .decode()
        .map_err(|e| e.to_string())?;
    let small = if img.width() > THUMB_WIDTH {
        img.thumbnail(THUMB_WIDTH, u32::MAX)
    } else {
        img
    };
    let tmp = thumb.with_extension(format!("tmp-{}", std::process::id()));
    let file = std::fs::File::create(&tmp).map_err(|e| e.to_string())?;
    JpegEncoder::new_with_quality(BufWriter::new(file), QUALITY)
        .encode_image(&small.to_rgb8())
        .map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, thumb).map_err(|e| e.to_string())
}

/// Thumbnails of `images` (paths relative to `root`) in `out/report/`: image path → URL relative to `out`,
/// `None` for a screenshot that could not be read (logged as a warning; the page says so).
pub fn make_thumbnails<'a>(
    root: &Path,
    images: impl IntoIterator<Item = &'a str>,
    out: &Path,
) -> Result<HashMap<String, Option<String>>, ReportError> {
    let dir = out.join(THUMB_DIR);
    std::fs::create_dir_all(&dir).map_err(|source| ReportError::Io {
        path: dir.clone(),
        source,
    })?;
    let unique: Vec<&str> = images.into_iter().collect::<BTreeSet<_>>().into_iter().collect();
    Ok(unique
        .par_iter()
        .map(|&image| {
            let name = thumb_name(image);
            let source = root.join(image);
            let url = match make_one(&source, &dir.join(&name)) {
                Ok(()) => Some(format!("{THUMB_DIR}/{name}")),
                Err(e) => {
                    tracing::warn!("report: screenshot {}: {e}", source.display());
                    None
                }
            };
            (image.to_owned(), url)
        })
        .collect())
}
