//! The checks `data validate` makes of a step, made by the importers before the step is written (the benchmark
//! loader's own rules, from [`crate::dataset`]): so an import writes only what the loader accepts.

use std::path::Path;

use super::episode::{data_step, ImageData, StepDraft, IMAGES_DIR, MISSING_SCREENSHOT};
use crate::dataset::{check_screenshot_size, check_step};

/// The kind of a step left out because its screenshot is not an image this program reads.
pub(super) const UNREADABLE_SCREENSHOT: &str = "unreadable screenshot";

/// The kind of a step left out because its screenshot's size does not fit the step's screen.
pub(super) const SCREENSHOT_SIZE: &str = "screenshot whose aspect ratio differs from the screen's";

/// The pixel size of an image file from its header, or the kind of problem.
pub(super) fn image_size(path: &Path) -> Result<[u32; 2], &'static str> {
    if !path.is_file() {
        return Err(MISSING_SCREENSHOT);
    }
    image::ImageReader::open(path)
        .and_then(|r| r.with_guessed_format())
        .ok()
        .and_then(|r| r.into_dimensions().ok())
        .map(|(w, h)| [w, h])
        .ok_or(UNREADABLE_SCREENSHOT)
}

/// A screenshot's pixel size (from its header, its format sniffed from the bytes) and the file extension it is
/// written under, or the kind of problem.
fn screenshot_header(image: &ImageData) -> Result<([u32; 2], String), &'static str> {
    match image {
        ImageData::File(p) => {
            let size = image_size(p)?;
            let ext = p
                .extension()
                .and_then(|e| e.to_str())
                .filter(|e| e.chars().all(|c| c.is_ascii_alphanumeric()))
                .unwrap_or("png")
                .to_ascii_lowercase();
            Ok((size, ext))
        }
        ImageData::Bytes(b) => {
            let reader = image::ImageReader::new(std::io::Cursor::new(b))
                .with_guessed_format()
                .map_err(|_| UNREADABLE_SCREENSHOT)?;
            let format = reader.format().ok_or(UNREADABLE_SCREENSHOT)?;
            let ext = format
                .extensions_str()
                .first()
                .ok_or(UNREADABLE_SCREENSHOT)?;
            let (w, h) = reader
                .into_dimensions()
                .map_err(|_| UNREADABLE_SCREENSHOT)?;
            Ok(([w, h], ext.to_string()))
        }
    }
}

/// The checks `data validate` makes of a step, made before it is written: the screenshot is an image whose size
/// fits the screen, and the loader accepts the step (its gold point on the screen, its boxes inside it). Returns
/// the screenshot's file extension, or the kind of problem and what is wrong.
pub(super) fn check_draft(s: &StepDraft) -> Result<String, (String, Option<String>)> {
    let (size, ext) = screenshot_header(&s.image).map_err(|k| (k.to_string(), None))?;
    check_screenshot_size(size, s.screen).map_err(|m| (SCREENSHOT_SIZE.to_string(), Some(m)))?;
    let step = data_step(s, format!("{IMAGES_DIR}/episode/{}.{ext}", s.source_index));
    check_step(&step, s.screen).map_err(|r| (r.kind(), Some(r.message().to_string())))?;
    Ok(ext)
}
