"""Transformer shapes of the served models, from each model's Hugging Face config.json.

Parameter count and KV bytes per token are derived from the shape, not typed in, so a test can
check them against the published totals.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    """A dense decoder-only transformer (Llama family: GQA attention, SwiGLU MLP, untied embeddings)."""

    name: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    bytes_per_param: float = 2.0  # bf16; 1.0 for FP8 checkpoints
    kv_bytes_per_elem: float = 2.0  # KV cache dtype (bf16 by default)
    tied_embeddings: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        for key in ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "intermediate", "vocab"):
            if getattr(self, key) <= 0:
                raise ValueError(f"model {self.name}: {key} must be positive, got {getattr(self, key)}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"model {self.name}: n_heads {self.n_heads} not a multiple of n_kv_heads {self.n_kv_heads}"
            )

    @property
    def params_per_layer(self) -> int:
        q_o = 2 * self.hidden * self.n_heads * self.head_dim
        k_v = 2 * self.hidden * self.n_kv_heads * self.head_dim
        mlp = 3 * self.hidden * self.intermediate
        norms = 2 * self.hidden
        return q_o + k_v + mlp + norms

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """All parameters: layers, final norm, input embedding and (untied) LM head."""
        heads = 1 if self.tied_embeddings else 2
        return self.n_layers * self.params_per_layer + self.hidden + heads * self.embedding_params

    @property
    def streamed_params(self) -> int:
        """Parameters every forward pass reads in full: all but the input embedding table, which is only indexed."""
        return self.params - (0 if self.tied_embeddings else self.embedding_params)

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_param

    @property
    def streamed_weight_bytes(self) -> float:
        return self.streamed_params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V, every layer, every KV head."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.kv_bytes_per_elem

    @property
    def attention_flops_per_pair(self) -> float:
        """FLOPs for one (query token, key token) pair over all layers: QK^T and PV, 2 FLOPs per MAC."""
        return 4.0 * self.n_layers * self.n_heads * self.head_dim

    def with_weights(self, bytes_per_param: float, suffix: str) -> ModelSpec:
        """The same shape with another weight width (e.g. an FP8 checkpoint)."""
        return ModelSpec(
            name=self.name + suffix, n_layers=self.n_layers, hidden=self.hidden, n_heads=self.n_heads,
            n_kv_heads=self.n_kv_heads, head_dim=self.head_dim, intermediate=self.intermediate, vocab=self.vocab,
            bytes_per_param=bytes_per_param, kv_bytes_per_elem=self.kv_bytes_per_elem,
            tied_embeddings=self.tied_embeddings, source=self.source,
        )


# meta-llama/Llama-3.1-8B config.json: hidden_size 4096, num_hidden_layers 32, num_attention_heads 32,
# num_key_value_heads 8, head_dim 128 (4096/32), intermediate_size 14336, vocab_size 128256,
# tie_word_embeddings false, torch_dtype bfloat16. 8,030,261,248 parameters.
LLAMA_3_1_8B = ModelSpec(
    name="Llama-3.1-8B", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8, head_dim=128,
    intermediate=14336, vocab=128256,
    source="https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json",
)

# meta-llama/Llama-3.1-70B config.json: hidden_size 8192, num_hidden_layers 80, num_attention_heads 64,
# num_key_value_heads 8, head_dim 128, intermediate_size 28672, vocab_size 128256, untied. 70,553,706,496 parameters.
LLAMA_3_1_70B = ModelSpec(
    name="Llama-3.1-70B", n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8, head_dim=128,
    intermediate=28672, vocab=128256,
    source="https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json",
)

MODELS: dict[str, ModelSpec] = {m.name: m for m in (LLAMA_3_1_8B, LLAMA_3_1_70B)}
