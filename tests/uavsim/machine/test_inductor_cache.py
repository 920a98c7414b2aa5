"""`uavsim.machine.inductor_cache`: a capped CPU class compiles into a cache of its own."""

from __future__ import annotations

import pytest

from uavsim.machine.inductor_cache import CACHE_VARIABLE, class_cache_dir, inductor_default, use_class_cache

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}  # the AVX2 class emulated


def test_a_capped_class_gets_a_cache_named_after_its_caps():
    environ = dict(AVX2, PATH="/bin")
    path = use_class_cache(environ)
    assert path is not None and environ[CACHE_VARIABLE] == str(path)
    assert path.name.endswith("_aten-avx2_onednn-avx2") and path.name.startswith("torchinductor_")


@pytest.mark.parametrize(
    "caps",
    [{"ATEN_CPU_CAPABILITY": "avx2"}, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}],
)
def test_each_set_of_caps_has_its_own_cache(caps):
    assert class_cache_dir(caps) not in (None, class_cache_dir(AVX2))


def test_odd_characters_in_a_cap_do_not_reach_the_path():
    path = class_cache_dir({"ATEN_CPU_CAPABILITY": " AVX2/../x "})
    assert path is not None and "/" not in path.name and ".." not in path.name and " " not in path.name


@pytest.mark.parametrize("environ", [{}, {"ATEN_CPU_CAPABILITY": "  ", "PATH": "/bin"}])
def test_an_uncapped_process_keeps_torchs_default_cache(environ):
    before = dict(environ)
    assert use_class_cache(environ) is None
    assert environ == before


def test_a_cache_the_user_chose_is_kept():
    environ = dict(AVX2, **{CACHE_VARIABLE: "/data/my-cache"})
    assert use_class_cache(environ) is None
    assert environ[CACHE_VARIABLE] == "/data/my-cache"


def test_inductors_own_default_counts_as_unset():
    # inductor writes its default into the variable when it first opens its cache (torch._dynamo.reset() does)
    default = inductor_default()
    assert default is not None  # torch 2.13 names it
    environ = dict(AVX2, **{CACHE_VARIABLE: str(default)})
    assert use_class_cache(environ) == class_cache_dir(AVX2)
    assert environ[CACHE_VARIABLE] == str(class_cache_dir(AVX2))
