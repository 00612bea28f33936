"""Random-weight GGUF files: llama.cpp's Q4_K_M mix as the synthetic ~1B model uses it."""

from specdecode.app.bench.synthetic import q4_k_m


def test_q4_k_m_gives_six_bits_to_the_embedding_and_to_a_share_of_v_and_down_layers():
    layers = 16
    assert q4_k_m("token_embd", 0, layers) == "Q6_K"
    assert {q4_k_m(p, i, layers) for p in ("attn_q", "attn_k", "attn_output", "ffn_gate",
                                            "ffn_up") for i in range(layers)} == {"Q4_K"}
    more = [i for i in range(layers) if q4_k_m("ffn_down", i, layers) == "Q6_K"]
    assert more[:2] == [0, 1] and more[-2:] == [14, 15]  # first and last eighth
    assert 0 < len(more) < layers
    assert more == [i for i in range(layers) if q4_k_m("attn_v", i, layers) == "Q6_K"]
