"""The method registry: name -> Method. Adding a method touches only its own module and one line here."""

from __future__ import annotations

from dataclasses import dataclass

from kamalcli.errors import KamalError
from kamalcli.methods.base import FeatureContext, Method, Objective, Options, TeacherOutputs
from kamalcli.methods import feature_options as fo
from kamalcli.methods import muki, uhc, vanilla_kd

REGISTRY: dict[str, Method] = {}


def register(method: Method) -> Method:
    if method.name in REGISTRY:
        raise ValueError(f"method {method.name} registered twice")
    REGISTRY[method.name] = method
    return method


def get_method(name: str) -> Method:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KamalError(f"unknown method {name!r} (methods: {', '.join(REGISTRY)}; see `kamal methods`)") from None


@dataclass(frozen=True)
class NoOptions(Options):
    pass


register(Method("muki-hard", "each row learns from the most certain teacher (score=auto: the score chosen without "
                              "labels; paper=true: MC dropout); rows re-weighted by the certainty margin, scaled to "
                              "mean 1 within each picked teacher's rows (reweight=true: the margin as it is); "
                              "commit=auto: vanilla-kd's target unless the pick is measured to be clearly better; "
                              "smooth=auto: each target half averaged over its 10 nearest transfer rows; "
                              "refit=auto (off by default): a teacher's RMD fitted again on the transfer rows where "
                              "the generated text does not read its rows; pick_smooth=auto: the pick by each row's confidence "
                              "averaged over its 10 nearest transfer rows",
                muki.MukiHardOptions, muki.build_muki_hard, paper="Li et al., EMNLP 2022", confidences=True,
                token_build=muki.build_token_muki_hard, gold_target=True))
register(Method("muki-soft", "each row learns from all teachers, weighted by softmax(certainty / tau) "
                              "(paper=true: MC dropout); margin re-weighting, per picked teacher as muki-hard's",
                muki.MukiSoftOptions, muki.build_muki_soft, paper="Li et al., EMNLP 2022", confidences=True,
                token_build=muki.build_token_muki_soft, gold_target=True))
register(Method("vanilla-kd", "the student matches softmax over all teachers' concatenated logits",
                vanilla_kd.KDOptions, vanilla_kd.build_vanilla_kd, paper="Hinton et al., 2015",
                token_build=vanilla_kd.build_token_vanilla_kd, gold_target=True))
register(Method("uhc", "the student's probabilities, renormalised over each teacher's labels, match that teacher",
                uhc.UHCOptions, uhc.build_uhc, paper="Vongkulbhisal et al., CVPR 2019", token_build=uhc.build_token_uhc))


def _feature_method(name: str, module: str, options: type, build: str, summary: str, paper: str, features: str,
                    labels: str = "no", one_process: str = "") -> Method:
    """Feature-level methods need torch: their modules load only when one is built."""

    def lazy_build(context, chosen):
        import importlib

        return getattr(importlib.import_module(f"kamalcli.methods.{module}"), build)(context, chosen)

    return Method(name, summary, options, lazy_build, paper=paper, level="feature", features=features, labels=labels,
                  one_process=one_process)


register(_feature_method(
    "dfa", "dfa", fo.DFAOptions, "build_dfa",
    "per aligned layer, an encoder over the teachers' concatenated states, decoders rebuilding each teacher; "
    "the student's adapted state is pulled to the encoding; plus vanilla-kd",
    "Shen et al., AAAI 2019", "in the loop, per token (mean-pooled from the probe cache when tokenisers differ, or features=pooled)"))
register(_feature_method(
    "cfl", "cfl", fo.CFLOptions, "build_cfl",
    "teachers' and student's last-layer features projected into a common space: MMD between student and each "
    "teacher there, reconstruction of each teacher; plus vanilla-kd",
    "Luo et al., IJCAI 2019", "cached, mean-pooled (probe)"))
register(_feature_method(
    "mt-bert", "mt_bert", fo.MTBertOptions, "build_mt_bert",
    "student layer j matches each teacher's aligned layer through a learnable map; per-teacher distillation "
    "weighted by 1/(1+CE) with gold labels (labels=true), or kamal's label-free 1/(1+entropy) on each teacher's block",
    "Wu et al., 2021 (label-free variant: kamal)",
    "in the loop, per token (mean-pooled from the probe cache when tokenisers differ, or features=pooled)",
    labels="optional"))
register(_feature_method(
    "rl-kd", "rl_kd", fo.RLKDOptions, "build_rl_kd",
    "a logistic policy per teacher picks, row by row, which teachers the student learns from (their average); "
    "REINFORCE with a baseline. labels=true: the paper (gold labels, one label set, rewards r1/r2/r3); "
    "labels=false: kamal's label-free variant (confidences in the state, reward: agreement with muki-hard's "
    "target on held-out rows)",
    "Yuan et al., AAAI 2021 (label-free variant: kamal)",
    "R(x): a frozen encoder's [CLS] vector, cached; teachers' cached outputs", labels="optional",
    one_process="its policy takes one REINFORCE step per whole batch, and its phases are not sharded"))
register(_feature_method(
    "stratanet", "stratanet", fo.StrataNetOptions, "build_stratanet",
    "per block of layers, a selective transformer merges the teachers' block vectors, each enriched with its "
    "relative-Mahalanobis confidence, into an [AMAL] target the student's block matches; plus KL to the "
    "confidence-weighted teacher mix at T = 0.75 (data-free: train it on `kamal synthesize` text)",
    "Vijayaraghavan et al., 2024 (anti-collapse guard and teacher weights: kamal)",
    "cached, mean-pooled per block (probe)"))
register(Method("ensemble", "baseline, no training: argmax over all teachers' concatenated logits (kamal eval --baseline)",
                NoOptions, None))
register(Method("teacher", "baseline, no training: one teacher alone, other labels at zero (kamal eval --baseline teacher:NAME)",
                NoOptions, None))
register(Method("merge", "baseline, no training: the teachers' encoders merged in weight space from their pretrained base "
                         "(task-arithmetic, ties or average), each teacher's head on it, logits concatenated "
                         "(kamal eval --baseline merge[:METHOD] --base NAME)",
                NoOptions, None, paper="Ilharco et al., ICLR 2023; Yadav et al., NeurIPS 2023"))

__all__ = ["REGISTRY", "FeatureContext", "Method", "Objective", "Options", "TeacherOutputs", "get_method", "register"]
