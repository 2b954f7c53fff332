"""The checkpoints of ``bench/transformers_js.py`` (random weights, built inside ``.venv-optimum`` with its older
transformers, so that both exporters read the same files), optimum's side of each row (``optimum-cli export onnx``,
its files renamed into transformers.js's layout and quantized with onnxruntime's quantizers), and the inputs both
folders are timed on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Row name -> (transformers.js task, optimum-cli task, what it is). The builder of each is in ``build``.
ROWS = {
    "bert": ("text-classification", "text-classification",
             "BERT-base-sized encoder (hidden 768, 12 layers, 12 heads, intermediate 3072, vocab 30522), 2 labels"),
    "whisper": ("automatic-speech-recognition", "automatic-speech-recognition-with-past",
                ("Whisper-tiny-shaped (d_model 384, 4+4 layers, 6 heads, ffn 1536, vocab 51865, 80 mel bins, 30 s "
                "window)")),
    "vit": ("image-classification", "image-classification",
            "ViT-B/16 (hidden 768, 12 layers, 12 heads, 224 px, patch 16), 1000 labels"),
    "llama": ("text-generation", "text-generation-with-past",
              "Llama-style decoder (hidden 256, 4 layers, 4 heads, 2 KV heads, intermediate 1024, vocab 32000)"),
    "qwen05": ("text-generation", "text-generation-with-past",
               ("Qwen2-0.5B-shaped decoder (hidden 896, 24 layers, 14 heads, 2 KV heads, intermediate 4864, "
               "vocab 151936, tied embeddings)")),
}
DEFAULT_ROWS = ("bert", "whisper", "vit", "llama")
SUFFIX = {"fp32": "", "fp16": "_fp16", "q8": "_quantized", "q4": "_q4", "q4f16": "_q4f16"}
GENERATING = ("text-generation", "automatic-speech-recognition")
NEW_TOKENS = 16
PROMPT = " ".join(f"w{i}" for i in (5, 17, 33, 8, 41, 12, 9, 27, 64, 3, 88, 15, 21, 70, 6, 19))  # 16 words
WORDS = ("the quick brown fox jumps over a lazy dog while people in the city watch and some of them laugh "  # noqa: SIM905
         "at how fast it runs across green fields near an old river under bright blue sky on this warm day").split()
SENTENCE = " ".join(WORDS[:24])
BATCH = 8


def sessions(task: str) -> tuple[str, ...]:
    """The ``onnx/`` file stems transformers.js loads for ``task``."""
    return ("encoder_model", "decoder_model_merged") if task == "automatic-speech-recognition" else ("model",)


# -- the checkpoints (run in .venv-optimum) ---------------------------------------------------------------------


def _word_tokenizer(directory: str, vocab_size: int, kind: str) -> None:
    """The test suite's word-level tokenizer (``<pad>``=0, ``<s>``=1, ``</s>``=2, then ``w3``, ``w4``...)."""
    sys.path.insert(0, ROOT)
    from tests.test_transformers_js import write_special_tokenizer

    write_special_tokenizer(directory, vocab_size, kind)


def _bert_tokenizer(directory: str) -> None:
    """A lower-casing WordPiece tokenizer over WORDS with BERT's special tokens and ``[CLS] ... [SEP]`` template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {t: i for i, t in enumerate(dict.fromkeys([*specials, *WORDS, ",", "."]))}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.add_special_tokens([AddedToken(t, special=True) for t in specials])
    tokenizer.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": 512,
                   **{f"{n}_token": f"[{n.upper()}]" for n in ("pad", "unk", "cls", "sep", "mask")}}, f)


def build(row: str, directory: str) -> None:
    """Save row ``row``'s random checkpoint (seed 0) with its tokenizer or processor under ``directory``. Runs in
    .venv-optimum (transformers 4.57), whose files both transformers releases read. Generation configs have no
    end token, so that both folders generate exactly NEW_TOKENS tokens."""
    import torch
    import transformers

    os.makedirs(directory, exist_ok=True)
    torch.manual_seed(0)
    if row == "bert":
        config = transformers.BertConfig(num_labels=2)
        model = transformers.BertForSequenceClassification(config)
        _bert_tokenizer(directory)
    elif row == "vit":
        config = transformers.ViTConfig(num_labels=1000)
        model = transformers.ViTForImageClassification(config)
        transformers.ViTImageProcessor().save_pretrained(directory)
    elif row == "whisper":
        config = transformers.WhisperConfig(
            vocab_size=51865, d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
            decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536, num_mel_bins=80,
            max_source_positions=1500, max_target_positions=448, decoder_start_token_id=1, pad_token_id=0,
            bos_token_id=1, eos_token_id=2, suppress_tokens=None, begin_suppress_tokens=None)
        model = transformers.WhisperForConditionalGeneration(config)
        transformers.WhisperFeatureExtractor(feature_size=80).save_pretrained(directory)
        _word_tokenizer(directory, config.vocab_size, "WhisperTokenizer")
    elif row in ("llama", "qwen05"):
        if row == "llama":
            config = transformers.LlamaConfig(vocab_size=32000, hidden_size=256, intermediate_size=1024,
                                              num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                              max_position_embeddings=2048, bos_token_id=1, eos_token_id=2,
                                              pad_token_id=0)
            model = transformers.LlamaForCausalLM(config)
        else:
            config = transformers.Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                                              num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                                              max_position_embeddings=4096, tie_word_embeddings=True,
                                              bos_token_id=1, eos_token_id=2, pad_token_id=0)
            model = transformers.Qwen2ForCausalLM(config)
        _word_tokenizer(directory, config.vocab_size, "PreTrainedTokenizerFast")
    else:
        raise SystemExit(f"unknown row {row!r}")
    model = model.eval()
    if hasattr(model, "generation_config") and model.can_generate():
        model.generation_config.eos_token_id = None
        model.generation_config.forced_eos_token_id = None
    model.save_pretrained(directory)


# -- optimum's folder (run in .venv-optimum) --------------------------------------------------------------------


def optimum_folder(row: str, checkpoint: str, out: str, dtypes: list[str]) -> None:
    """``optimum-cli export onnx`` of ``checkpoint`` for row ``row``'s task, arranged as transformers.js loads it:
    the checkpoint's JSON files (config, generation config, tokenizer, processor) beside ``onnx/<session>.onnx``,
    and the other ``dtypes`` made from that float32 file: q8 by ``onnxruntime.quantization.quantize_dynamic``
    (int8 weights, per tensor; activations quantized at run time), q4 by onnxruntime's ``MatMulNBitsQuantizer``
    (4-bit symmetric, blocks of 32, as transformers.js's scripts/quantize.py), fp16 by onnxruntime's
    ``float16.convert_float_to_float16`` (inputs and outputs kept float32)."""
    import onnx

    task, optimum_task, _ = ROWS[row]
    raw = out + ".raw"
    shutil.rmtree(raw, ignore_errors=True)
    # optimum's CLI, with diffusers hidden: optimum imports it wherever it is installed, and .venv's (seen through
    # the layered environment) needs a huggingface-hub >= 1 that transformers 4.57 does not run with.
    cli = "import sys; sys.modules['diffusers'] = None; from optimum.commands.optimum_cli import main; main()"
    subprocess.run([sys.executable, "-c", cli, "export", "onnx", "--model", checkpoint, "--task", optimum_task, raw],
                   check=True)
    folder = os.path.join(out, "onnx")
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(checkpoint):
        if name.endswith(".json"):
            shutil.copy(os.path.join(checkpoint, name), os.path.join(out, name))
    for stem in sessions(task):
        source = os.path.join(raw, f"{stem}.onnx")
        model = onnx.load(source)
        for dtype in dtypes:
            path = os.path.join(folder, f"{stem}{SUFFIX[dtype]}.onnx")
            _save(_variant(model, source, dtype), path)
    shutil.rmtree(raw, ignore_errors=True)


def _save(model: object, path: str) -> None:
    import onnx

    large = model.ByteSize() >= 2**31 - 2**24  # protobuf's limit: the weights beside it, as transformers.js reads
    onnx.save(model, path, save_as_external_data=large, location=os.path.basename(path) + "_data")


def _variant(model: object, source: str, dtype: str) -> object:
    """``model`` (optimum's float32 ModelProto, read from ``source``) in transformers.js's ``dtype``."""
    import tempfile

    import onnx

    if dtype == "fp32":
        return model
    if dtype == "q4":
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        quantizer = MatMulNBitsQuantizer(onnx.load(source), bits=4, block_size=32, is_symmetric=True)
        quantizer.process()
        return quantizer.model.model
    if dtype == "q8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        with tempfile.TemporaryDirectory() as scratch:
            target = os.path.join(scratch, "q8.onnx")
            quantize_dynamic(source, target, weight_type=QuantType.QInt8, extra_options={"EnableSubgraph": True},
                             use_external_data_format=model.ByteSize() >= 2**31 - 2**24)
            return onnx.load(target)
    if dtype == "fp16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        return convert_float_to_float16(onnx.load(source), keep_io_types=True)
    raise SystemExit(f"dtype {dtype!r} is not made on optimum's side here")


# -- the inputs -------------------------------------------------------------------------------------------------


def write_inputs(work: str) -> dict:
    """The inputs both exporters' folders get, written under ``work``: a 224-pixel PNG (and 8 for a batch), 5 s of
    16 kHz noise as raw float32 (Node) and as a WAV file (the page), and the texts. Paths relative to ``work``."""
    import wave

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    images = []
    for i in range(BATCH):
        name = f"image{i}.png"
        Image.fromarray(rng.integers(0, 255, (224, 224, 3), dtype=np.uint8)).save(os.path.join(work, name))
        images.append(name)
    clip = (rng.standard_normal(16000 * 5) * 0.1).clip(-1, 1).astype(np.float32)
    clip.tofile(os.path.join(work, "clip.f32"))
    with wave.open(os.path.join(work, "clip.wav"), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(16000)
        f.writeframes((clip * 32767).astype("<i2").tobytes())
    texts = [" ".join(WORDS[i:i + 24]) for i in range(BATCH)]
    return {"images": images, "texts": texts, "f32": "clip.f32", "wav": "clip.wav"}


def row_inputs(task: str, inputs: dict) -> tuple[dict, dict | None, dict]:
    """(one input, a batch or None, call options) for ``task``, in the Node runner's form."""
    if task == "text-classification":
        return {"text": SENTENCE}, {"texts": inputs["texts"]}, {}
    if task == "image-classification":
        return {"images": inputs["images"][:1]}, {"images": inputs["images"]}, {}
    if task == "automatic-speech-recognition":
        return {"f32": inputs["f32"]}, None, {"max_new_tokens": NEW_TOKENS}
    return {"text": PROMPT}, None, {"max_new_tokens": NEW_TOKENS, "do_sample": False}


# -- Node -------------------------------------------------------------------------------------------------------
