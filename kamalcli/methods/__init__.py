"""The method registry: name -> Method. Adding a method touches only its own module and one line here."""

from __future__ import annotations

from dataclasses import dataclass

from kamalcli.errors import KamalError
from kamalcli.methods.base import Method, Objective, Options, TeacherOutputs
from kamalcli.methods import output_level as ol

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


register(Method("muki-hard", "each row learns from the teacher MC dropout finds most certain; rows re-weighted by the certainty margin",
                ol.MukiHardOptions, ol.build_muki_hard, paper="Li et al., EMNLP 2022"))
register(Method("muki-soft", "each row learns from all teachers, weighted by softmax(certainty / tau); margin re-weighting",
                ol.MukiSoftOptions, ol.build_muki_soft, paper="Li et al., EMNLP 2022"))
register(Method("vanilla-kd", "the student matches softmax over all teachers' concatenated logits",
                ol.KDOptions, ol.build_vanilla_kd, paper="Hinton et al., 2015"))
register(Method("uhc", "the student's probabilities, renormalised over each teacher's labels, match that teacher",
                ol.UHCOptions, ol.build_uhc, paper="Vongkulbhisal et al., CVPR 2019"))
register(Method("ensemble", "baseline, no training: argmax over all teachers' concatenated logits (kamal eval --baseline)",
                NoOptions, None))
register(Method("teacher", "baseline, no training: one teacher alone, other labels at zero (kamal eval --baseline teacher:NAME)",
                NoOptions, None))

__all__ = ["REGISTRY", "Method", "Objective", "Options", "TeacherOutputs", "get_method", "register"]
