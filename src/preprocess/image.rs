//! One picture → `PreparedImage`: convert to RGB8, smart-resize (bicubic, antialiased), rescale + normalise,
//! repeat the frame to `temporal_patch_size`, and lay the patches out in transformers' order (merge-block rows,
//! `(C, T, P, P)` columns).

use std::path::Path;

use image::{DynamicImage, RgbImage};
use rayon::prelude::*;

use super::config::{ImageProcessorConfig, ProcessorBackend};
use super::resample::resize_rgb8;
use super::smart_resize::smart_resize;
use super::{PreparedImage, PreprocessError};

/// Normalised value of every uint8 level, per channel: the whole of rescale + normalise is a table look-up.
type Lut = [[f32; 256]; 3];

/// Builds the look-up table with the float32 arithmetic of the chosen backend, so the values are bit-identical
/// to transformers' (checked against goldens from both backends):
///
/// * torchvision: fused `(x − f32(mean·255)) / f32(std·255)` in float32 (`_fuse_mean_std_and_rescale_factor`);
/// * PIL: `f32(x · rescale_factor)` computed in float64, then `(x − mean) / std` in float32.
fn normalisation_lut(cfg: &ImageProcessorConfig) -> Lut {
    let mut lut = [[0f32; 256]; 3];
    for (c, table) in lut.iter_mut().enumerate() {
        let (mean, std) = (cfg.image_mean[c], cfg.image_std[c]);
        match cfg.backend {
            ProcessorBackend::Torchvision => {
                let inv = (1.0 / cfg.rescale_factor) as f32;
                let (m, s) = (mean * inv, std * inv);
                for (v, out) in table.iter_mut().enumerate() {
                    *out = (v as f32 - m) / s;
                }
            }
            ProcessorBackend::Pil => {
                for (v, out) in table.iter_mut().enumerate() {
                    let x = (v as f64 * cfg.rescale_factor) as f32;
                    *out = (x - mean) / std;
                }
            }
        }
    }
    lut
}

/// Lays out a normalised `height × width` RGB8 picture as patch rows (see `PreparedImage::patches`).
/// `height` and `width` must be multiples of `patch_size · merge_size`.
fn patchify(
    rgb: &[u8],
    height: usize,
    width: usize,
    cfg: &ImageProcessorConfig,
    lut: &Lut,
) -> Vec<f32> {
    let (p, m, t) = (cfg.patch_size, cfg.merge_size, cfg.temporal_patch_size);
    let (gh, gw) = (height / p, width / p);
    let dim = cfg.patch_dim();
    let plane = p * p;
    let mut out = vec![0f32; gh * gw * dim];
    out.par_chunks_mut(dim).enumerate().for_each(|(r, row)| {
        let (block, within) = (r / (m * m), r % (m * m));
        let (bh, bw) = (block / (gw / m), block % (gw / m));
        let y0 = (bh * m + within / m) * p;
        let x0 = (bw * m + within % m) * p;
        for (c, table) in lut.iter().enumerate() {
            let chan = &mut row[c * t * plane..(c + 1) * t * plane];
            let (first, rest) = chan.split_at_mut(plane);
            for y in 0..p {
                let src = &rgb[((y0 + y) * width + x0) * 3..((y0 + y) * width + x0 + p) * 3];
                for (x, px) in src.chunks_exact(3).enumerate() {
                    first[y * p + x] = table[px[c] as usize];
                }
            }
            // A still image fills every temporal slot with the same frame.
            for copy in rest.chunks_exact_mut(plane) {
                copy.copy_from_slice(first);
            }
        }
    });
    out
}

/// Prepares an RGB8 picture for the vision tower: smart-resize to multiples of `patch_size · merge_size`
/// within the config's pixel bounds, bicubic resample (bit-exact with the config's backend), rescale and
/// normalise (bit-exact float32), and patchify.
pub fn prepare_rgb8(
    img: &RgbImage,
    cfg: &ImageProcessorConfig,
) -> Result<PreparedImage, PreprocessError> {
    cfg.validate().map_err(|reason| PreprocessError::Config {
        path: "<in memory>".into(),
        reason,
    })?;
    let (w, h) = (img.width() as usize, img.height() as usize);
    let (rh, rw) = smart_resize(h, w, cfg.factor(), cfg.min_pixels, cfg.max_pixels)?;
    let resized;
    let pixels: &[u8] = if (rh, rw) == (h, w) {
        img.as_raw()
    } else {
        resized = resize_rgb8(img.as_raw(), w, h, rw, rh, cfg.backend);
        &resized
    };
    let lut = normalisation_lut(cfg);
    let patches = patchify(pixels, rh, rw, cfg, &lut);
    Ok(PreparedImage {
        patches,
        grid_thw: [1, rh / cfg.patch_size, rw / cfg.patch_size],
        resized_wh: [rw as u32, rh as u32],
        original_wh: [w as u32, h as u32],
    })
}

/// Like [`prepare_rgb8`] for any decoded picture. Other colour types are converted to RGB8 first; an alpha
/// channel is dropped (PIL's `convert("RGB")`, which transformers' `convert_to_rgb` uses), not composited.
pub fn prepare_image(
    img: &DynamicImage,
    cfg: &ImageProcessorConfig,
) -> Result<PreparedImage, PreprocessError> {
    match img {
        DynamicImage::ImageRgb8(rgb) => prepare_rgb8(rgb, cfg),
        other => prepare_rgb8(&other.to_rgb8(), cfg),
    }
}

/// Decodes a PNG or JPEG file and prepares it; errors name the path.
pub fn load_and_prepare(
    path: &Path,
    cfg: &ImageProcessorConfig,
) -> Result<PreparedImage, PreprocessError> {
    let img = load_rgb8(path)?;
    prepare_rgb8(&img, cfg)
}

/// `[width, height]` of a PNG or JPEG file, from its header alone; errors name the path.
pub fn image_dimensions(path: &Path) -> Result<[u32; 2], PreprocessError> {
    let decode = |e: &dyn std::fmt::Display| PreprocessError::Decode {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let (w, h) = image::ImageReader::open(path)
        .map_err(|e| decode(&e))?
        .with_guessed_format()
        .map_err(|e| decode(&e))?
        .into_dimensions()
        .map_err(|e| decode(&e))?;
    Ok([w, h])
}

/// Decodes a PNG or JPEG file into RGB8 (alpha dropped); errors name the path.
pub fn load_rgb8(path: &Path) -> Result<RgbImage, PreprocessError> {
    let img = image::ImageReader::open(path)
        .map_err(|e| PreprocessError::Decode {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?
        .with_guessed_format()
        .map_err(|e| PreprocessError::Decode {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?
        .decode()
        .map_err(|e| PreprocessError::Decode {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
    Ok(match img {
        DynamicImage::ImageRgb8(rgb) => rgb,
        other => other.to_rgb8(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 56×84 picture whose pixel value encodes its position and channel.
    fn coded(width: u32, height: u32) -> RgbImage {
        RgbImage::from_fn(width, height, |x, y| {
            image::Rgb([(x % 256) as u8, (y % 256) as u8, ((x + y) % 7) as u8])
        })
    }

    #[test]
    fn patch_order_matches_hf_transpose() {
        let cfg = ImageProcessorConfig::default();
        let img = coded(84, 56);
        let prep = prepare_rgb8(&img, &cfg).unwrap();
        assert_eq!(prep.grid_thw, [1, 4, 6]);
        assert_eq!(prep.n_tokens(), 6);
        assert_eq!(prep.patches.len(), 24 * 1176);
        let lut = normalisation_lut(&cfg);
        // Reference: reshape (1,2,3,gh/2,2,14,gw/2,2,14) + transpose (0,3,6,4,7,2,1,5,8), written out.
        let (gh, gw) = (4usize, 6usize);
        let mut row = 0;
        for bh in 0..gh / 2 {
            for bw in 0..gw / 2 {
                for mh in 0..2 {
                    for mw in 0..2 {
                        for c in 0..3 {
                            for t in 0..2 {
                                for py in 0..14 {
                                    for px in 0..14 {
                                        let (y, x) =
                                            ((bh * 2 + mh) * 14 + py, (bw * 2 + mw) * 14 + px);
                                        let want =
                                            lut[c][img.get_pixel(x as u32, y as u32)[c] as usize];
                                        let col = ((c * 2 + t) * 14 + py) * 14 + px;
                                        assert_eq!(prep.patches[row * 1176 + col], want);
                                    }
                                }
                            }
                        }
                        row += 1;
                    }
                }
            }
        }
    }

    #[test]
    fn backends_agree_closely_without_resize() {
        let img = coded(56, 56);
        let a = prepare_rgb8(&img, &ImageProcessorConfig::default()).unwrap();
        let b = prepare_rgb8(
            &img,
            &ImageProcessorConfig::default().with_backend(ProcessorBackend::Pil),
        )
        .unwrap();
        let max = a
            .patches
            .iter()
            .zip(&b.patches)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(max < 1e-6, "{max}");
    }

    #[test]
    fn missing_file_names_path() {
        let err = load_and_prepare(
            Path::new("/nonexistent/shot.png"),
            &ImageProcessorConfig::default(),
        );
        assert!(err
            .unwrap_err()
            .to_string()
            .contains("/nonexistent/shot.png"));
    }
}
