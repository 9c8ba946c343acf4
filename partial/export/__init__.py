"""Export: a region's inference forward as serialized StableHLO (`fn.dump`, `fn.export`), and
`load`, which runs such a file without the code that defined it. The code map is `README.md`
beside this file.
"""

from .dump import dump_region, export_region
from .format import Artifact, Loaded, load

__all__ = [
    "dump_region",
    "export_region",
    "Artifact",
    "Loaded",
    "load",
]
