"""Which installed distributions a trace touches and which changed: the distribution a call site
lies in (``site_package``), the ones a run's call sites lie in (``trace_packages``), and those
whose versions differ between two environments (``package_changes``), so that a comparison files
an op inside a changed library under that library, never as the pipeline's first difference."""

from __future__ import annotations

import re
from dataclasses import dataclass

from detaudit.trace.run_trace import RunTrace


@dataclass
class PackageChange:
    """A distribution installed in a different version (or only) in one of the two environments."""

    name: str
    a: str | None
    b: str | None
    used: bool = False  # a call site of either trace lies in it


# Top-level modules whose distribution is named otherwise (the rest match by name).
MODULE_DISTRIBUTIONS = {"PIL": "pillow", "sklearn": "scikit-learn", "yaml": "pyyaml", "cv2": "opencv-python",
                        "attr": "attrs", "google": "protobuf", "skimage": "scikit-image", "dateutil": "python-dateutil"}


def normalized(name: str) -> str:
    """A distribution name as package indexes compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def site_package(site: str) -> str:
    """The distribution a call site (``transformers/modeling_utils.py:248 fn``) lies in, by its
    top-level module (normalised; ``""`` for a site outside any)."""
    path = site.split(":", 1)[0]
    top = path.split("/", 1)[0].removesuffix(".py")
    if not top or top.startswith("<") or top == "?":
        return ""
    return normalized(MODULE_DISTRIBUTIONS.get(top, top))


def package_changes(a: dict[str, str] | None, b: dict[str, str] | None, used: set[str]) -> list[PackageChange]:
    """The distributions whose versions differ between two environments (none when either is unknown),
    those whose code the traces ran first."""
    if a is None or b is None:
        return []
    left = {normalized(k): v for k, v in a.items()}
    right = {normalized(k): v for k, v in b.items()}
    changes = [PackageChange(name, left.get(name), right.get(name), name in used)
               for name in sorted(set(left) | set(right)) if left.get(name) != right.get(name)]
    return sorted(changes, key=lambda c: (not c.used, c.name))


def trace_packages(run: RunTrace) -> set[str]:
    """The distributions whose code any call site of a run lies in."""
    out: set[str] = set()
    for p in run.processes:
        out.update(site_package(d.site) for d in p.draws if d.library)
        out.update(site_package(o.at) for o in p.ops)
        out.update(site_package(at) for _, at in p.op_chains)
    out.discard("")
    return out
