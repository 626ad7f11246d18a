//! Memory-mapped safetensors weights that do not stay resident twice.
//!
//! candle's own mmap var builder copies every tensor out of the mapping and keeps the mapping alive while the
//! model is built, so a checkpoint loaded in its own dtype briefly occupies twice its size in RAM (the mapped file
//! pages plus the copies): 9.3 GB peak for a 4.6 GB f32 checkpoint. This backend maps each shard the same way,
//! copies a tensor out when the model asks for it, then tells the kernel the tensor's file pages are no longer
//! needed (`MADV_DONTNEED` on the read-only mapping: they are dropped, and would be re-read from the file if
//! touched again), so the peak stays near one copy of the weights.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use memmap2::{Mmap, UncheckedAdvice};
use safetensors::{Dtype, SafeTensors};

/// Where one tensor lives.
struct Entry {
    shard: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    /// Byte range in the shard file.
    start: usize,
    end: usize,
}

/// The tensors of one or more safetensors shards, mapped read-only.
pub(crate) struct MmapWeights {
    maps: Vec<(PathBuf, Mmap)>,
    index: HashMap<String, Entry>,
}

fn err(msg: String) -> candle_core::Error {
    candle_core::Error::Msg(msg)
}

impl MmapWeights {
    /// Map every shard and read its header.
    pub fn open(paths: &[PathBuf]) -> candle_core::Result<Self> {
        let mut maps = Vec::with_capacity(paths.len());
        let mut index = HashMap::new();
        for (shard, path) in paths.iter().enumerate() {
            let file =
                std::fs::File::open(path).map_err(|e| err(format!("{}: {e}", path.display())))?;
            // SAFETY: the checkpoint files are mapped read-only and must not change while the model loads.
            let map =
                unsafe { Mmap::map(&file) }.map_err(|e| err(format!("{}: {e}", path.display())))?;
            let (header, meta) = SafeTensors::read_metadata(&map)
                .map_err(|e| err(format!("{}: not a safetensors file: {e}", path.display())))?;
            let base = 8 + header;
            for (name, info) in meta.tensors() {
                let (start, end) = (base + info.data_offsets.0, base + info.data_offsets.1);
                index.insert(
                    name,
                    Entry {
                        shard,
                        dtype: info.dtype,
                        shape: info.shape.clone(),
                        start,
                        end,
                    },
                );
            }
            maps.push((path.clone(), map));
        }
        Ok(Self { maps, index })
    }

    fn entry(&self, name: &str) -> candle_core::Result<&Entry> {
        self.index
            .get(name)
            .ok_or_else(|| err(format!("missing tensor `{name}` in the safetensors files")))
    }

    fn load(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let e = self.entry(name)?;
        let (path, map) = &self.maps[e.shard];
        let src = match e.dtype {
            Dtype::F32 => DType::F32,
            Dtype::BF16 => DType::BF16,
            Dtype::F16 => DType::F16,
            Dtype::F64 => DType::F64,
            other => {
                return Err(err(format!(
                    "tensor `{name}` in {}: unsupported dtype {other:?}",
                    path.display()
                )));
            }
        };
        let bytes = &map[e.start..e.end];
        let t = Tensor::from_raw_buffer(bytes, src, &e.shape, &Device::Cpu)?
            .to_dtype(dtype)?
            .to_device(dev)?;
        release(map, e.start, e.end);
        Ok(t)
    }
}

/// Drop the file pages of `map[start..end]` from memory (whole pages inside the range only).
fn release(map: &Mmap, start: usize, end: usize) {
    const PAGE: usize = 4096;
    let (a, b) = (start.div_ceil(PAGE) * PAGE, end / PAGE * PAGE);
    if b > a {
        // SAFETY: the mapping is private and read-only; dropped pages are re-read from the unchanged file if
        // touched again, and no reference into them outlives this call (the tensor above owns a copy).
        let _ = unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, a, b - a) };
    }
}

impl SimpleBackend for MmapWeights {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let e = self.entry(name)?;
        if e.shape.as_slice() != s.dims() {
            return Err(err(format!(
                "tensor `{name}`: shape {:?} in the checkpoint, expected {:?}",
                e.shape,
                s.dims()
            )));
        }
        self.load(name, dtype, dev)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.load(name, dtype, dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }
}
