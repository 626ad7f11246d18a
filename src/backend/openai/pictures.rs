//! Screenshots as the server should see them: decoded, smart-resized under the run's pixel bounds with the same
//! resampler as the local engine (so the pixels are the ones the local engine would feed its vision tower), and
//! encoded as lossless PNG in a `data:` URL.

use std::path::Path;

use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use image::ImageEncoder;

use crate::openai::png_data_url;
use crate::preprocess::{load_rgb8, resize_rgb8, smart_resize, ImageProcessorConfig};

/// The `data:` URL of the picture at `path` at its smart-resized size, and that size `[w, h]`.
pub(crate) fn png_at_model_size(
    path: &Path,
    cfg: &ImageProcessorConfig,
) -> Result<(String, [u32; 2]), String> {
    let rgb = load_rgb8(path).map_err(|e| e.to_string())?;
    let (w, h) = (rgb.width() as usize, rgb.height() as usize);
    let (rh, rw) = smart_resize(h, w, cfg.factor(), cfg.min_pixels, cfg.max_pixels)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let pixels = if (rh, rw) == (h, w) {
        rgb.into_raw()
    } else {
        resize_rgb8(rgb.as_raw(), w, h, rw, rh, cfg.backend)
    };
    let mut png = Vec::new();
    PngEncoder::new_with_quality(&mut png, CompressionType::Fast, FilterType::Adaptive)
        .write_image(
            &pixels,
            rw as u32,
            rh as u32,
            image::ExtendedColorType::Rgb8,
        )
        .map_err(|e| format!("{}: encoding PNG: {e}", path.display()))?;
    Ok((png_data_url(&png), [rw as u32, rh as u32]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::parse_data_url;
    use crate::preprocess::{load_and_prepare, prepare_rgb8};

    #[test]
    fn the_server_gets_the_pixels_the_local_engine_would_use() {
        let cfg = ImageProcessorConfig::default().with_pixel_bounds(3136, 20_000);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shot.png");
        image::RgbImage::from_fn(150, 333, |x, y| {
            image::Rgb([(x * 7) as u8, (y * 3) as u8, (x ^ y) as u8])
        })
        .save(&path)
        .unwrap();
        let (url, size) = png_at_model_size(&path, &cfg).unwrap();
        let sent = image::load_from_memory(&parse_data_url(&url).unwrap().bytes)
            .unwrap()
            .to_rgb8();
        assert_eq!([sent.width(), sent.height()], size);
        // The server resizes nothing more, and its patches are the local engine's.
        let served = prepare_rgb8(&sent, &cfg).unwrap();
        let local = load_and_prepare(&path, &cfg).unwrap();
        assert_eq!(served.resized_wh, size);
        assert_eq!(served.patches, local.patches);
        assert!(png_at_model_size(&dir.path().join("missing.png"), &cfg)
            .unwrap_err()
            .contains("missing.png"));
    }
}
