"""Models and GPUs the planner knows by name, or reads from a TOML file.

Models: the GPT rows of Megatron-LM's SC'21 Table 1 (Narayanan et al., sequence 2048,
vocabulary 51200, FFN 4h), GPT-3 175B (Brown et al. 2020), Llama 2 7B and Llama 3 70B/405B
(their model cards: SwiGLU FFN, grouped-query attention), Mixtral 8x7B (Jiang et al. 2024) and
BERT-large (Devlin et al. 2019). GPUs: vendor datasheets (dense bf16 peak, HBM, NVLink per GPU
and direction).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_arnold.errors import ArnoldError


@dataclass(frozen=True)
class ModelSpec:
    """A transformer: sizes, and whether its FFN is gated (SwiGLU: three matrices)."""

    name: str
    layers: int
    hidden: int
    heads: int
    ffn_hidden: int
    vocab: int
    seq_len: int
    kv_heads: int | None = None  # grouped-query attention; None = heads
    experts: int = 1
    top_k: int = 1
    gated_ffn: bool = False

    @property
    def kv(self) -> int:
        """Key/value heads."""
        return self.kv_heads or self.heads

    def layer_params(self) -> int:
        """Parameters of one transformer layer (attention, FFN of every expert, norms)."""
        h = self.hidden
        head_dim = h // self.heads
        attention = h * h * 2 + 2 * h * self.kv * head_dim + 2 * h + 2 * self.kv * head_dim
        ffn_mats = 3 if self.gated_ffn else 2
        ffn = self.experts * (ffn_mats * h * self.ffn_hidden + self.ffn_hidden + h)
        router = h * self.experts if self.experts > 1 else 0
        return attention + ffn + router + 4 * h

    def expert_params_per_layer(self) -> int:
        """Parameters of one layer's experts (sharded by EP); 0 for a dense model."""
        if self.experts == 1:
            return 0
        ffn_mats = 3 if self.gated_ffn else 2
        return self.experts * (ffn_mats * self.hidden * self.ffn_hidden + self.ffn_hidden
                               + self.hidden)

    def embedding_params(self) -> int:
        """Word (and, for GPT/BERT, position) embeddings; the output layer shares them."""
        return self.vocab * self.hidden + (0 if self.gated_ffn else self.seq_len * self.hidden)

    def params(self) -> int:
        """All parameters."""
        return self.layers * self.layer_params() + self.embedding_params()


def _gpt(name: str, layers: int, hidden: int, heads: int) -> ModelSpec:
    return ModelSpec(name, layers, hidden, heads, 4 * hidden, 51200, 2048)


MODELS: dict[str, ModelSpec] = {m.name: m for m in (
    _gpt("gpt-1.7b", 24, 2304, 24), _gpt("gpt-3.6b", 30, 3072, 32),
    _gpt("gpt-7.5b", 36, 4096, 32), _gpt("gpt-18.4b", 40, 6144, 48),
    _gpt("gpt-39.1b", 48, 8192, 64), _gpt("gpt-76.1b", 60, 10240, 80),
    _gpt("gpt-145.6b", 80, 12288, 96), _gpt("gpt-310.1b", 96, 16384, 128),
    _gpt("gpt-529.6b", 105, 20480, 128), _gpt("gpt-1008b", 128, 25600, 160),
    ModelSpec("gpt3-175b", 96, 12288, 96, 4 * 12288, 50257, 2048),
    ModelSpec("llama2-7b", 32, 4096, 32, 11008, 32000, 4096, gated_ffn=True),
    ModelSpec("llama3-70b", 80, 8192, 64, 28672, 128256, 8192, kv_heads=8, gated_ffn=True),
    ModelSpec("llama3-405b", 126, 16384, 128, 53248, 128256, 8192, kv_heads=8,
              gated_ffn=True),
    ModelSpec("mixtral-8x7b", 32, 4096, 32, 14336, 32000, 4096, kv_heads=8, experts=8,
              top_k=2, gated_ffn=True),
    ModelSpec("bert-large", 24, 1024, 16, 4096, 30522, 512),
)}


@dataclass(frozen=True)
class GpuSpec:
    """One GPU: dense bf16 peak, memory, NVLink bandwidth per direction, and its memory (HBM)
    bandwidth, which bounds the elementwise work of a layer (see ``cost``)."""

    name: str
    peak_flops: float
    memory_bytes: float
    nvlink_bytes_per_s: float
    hbm_bytes_per_s: float = 2.0e12
    #: Share of peak the matrix multiplications reach on the site's software stack; None =
    #: the cost model's figure for the catalogue GPU of that name (``cost.EFFICIENCY``).
    efficiency: float | None = None


#: NVIDIA's data sheets (SXM parts): A100 80GB 2.039 TB/s, H100 3.35 TB/s, H200 4.8 TB/s.
GPUS: dict[str, GpuSpec] = {g.name: g for g in (
    GpuSpec("a100-80g", 312e12, 80e9, 300e9, 2.039e12),
    GpuSpec("h100-80g", 989e12, 80e9, 450e9, 3.35e12),
    GpuSpec("h200", 989e12, 141e9, 450e9, 4.8e12),
)}


def _model_file() -> type[Any]:
    """The schema of a model TOML file (pydantic, imported only when a file is read)."""
    from pydantic import BaseModel, ConfigDict, PositiveInt, model_validator

    class ModelFile(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        layers: PositiveInt
        hidden: PositiveInt
        heads: PositiveInt
        ffn_hidden: PositiveInt
        vocab: PositiveInt
        seq_len: PositiveInt
        kv_heads: PositiveInt | None = None
        experts: PositiveInt = 1
        top_k: PositiveInt = 1
        gated_ffn: bool = False

        @model_validator(mode="after")
        def shapes_fit(self) -> ModelFile:
            if self.hidden % self.heads:
                raise ValueError(f"heads ({self.heads}) must divide hidden ({self.hidden})")
            if self.kv_heads is not None and self.heads % self.kv_heads:
                raise ValueError(f"kv_heads ({self.kv_heads}) must divide heads ({self.heads})")
            if self.top_k > self.experts:
                raise ValueError(f"top_k ({self.top_k}) exceeds experts ({self.experts})")
            return self

    return ModelFile


def _gpu_file() -> type[Any]:
    """The schema of a GPU TOML file: positive, finite numbers."""
    from pydantic import BaseModel, ConfigDict, Field

    class GpuFile(BaseModel):
        model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
        peak_flops: float = Field(gt=0, strict=False)
        memory_bytes: float = Field(gt=0, strict=False)
        nvlink_bytes_per_s: float = Field(gt=0, strict=False)
        hbm_bytes_per_s: float = Field(default=2.0e12, gt=0, strict=False)
        efficiency: float | None = Field(default=None, gt=0, le=1, strict=False)

    return GpuFile


def _from_toml(path: Path, cls: type[Any], schema: type[Any]) -> Any:
    """``cls`` named after the file, from a TOML file checked against ``schema``: a file that
    cannot be read, an unknown or missing key, a value of the wrong type or out of range is
    one ``ArnoldError`` naming the key."""
    from pydantic import ValidationError

    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ArnoldError(f"{path}: cannot read it as TOML: {exc}") from None
    try:
        checked = schema.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        known = ", ".join(schema.model_fields)
        raise ArnoldError(f"{path}: {where}: {first['msg']}; the keys are {known}") from None
    return cls(name=path.stem, **checked.model_dump())


def load_model(name_or_path: str) -> ModelSpec:
    """A catalogue model by name, or a TOML file with ``layers, hidden, heads, ffn_hidden,
    vocab, seq_len`` (and optionally ``kv_heads, experts, top_k, gated_ffn``)."""
    if name_or_path in MODELS:
        return MODELS[name_or_path]
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        spec: ModelSpec = _from_toml(path, ModelSpec, _model_file())
        return spec
    raise ArnoldError(f"unknown model {name_or_path!r}; use one of {', '.join(MODELS)} or a "
                      "TOML file")


def load_gpu(name_or_path: str) -> GpuSpec:
    """A catalogue GPU by name, or a TOML file with ``peak_flops, memory_bytes,
    nvlink_bytes_per_s`` (optionally ``hbm_bytes_per_s`` and ``efficiency``)."""
    if name_or_path in GPUS:
        return GPUS[name_or_path]
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        spec: GpuSpec = _from_toml(path, GpuSpec, _gpu_file())
        return spec
    raise ArnoldError(f"unknown GPU {name_or_path!r}; use one of {', '.join(GPUS)} or a TOML "
                      "file")
