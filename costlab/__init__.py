"""costlab: learned cost models for tensor-program tuning in Apache TVM MetaSchedule."""

import os as _os

__version__ = "0.1.0"

# costlab's subpackages are the checkout's top-level folders (setup.cfg's package_dir). A Python started in the
# checkout's root (python -m or -c, as TVM starts its pool workers) finds this folder before an installed costlab,
# which then has none of them: from a checkout, they are looked up beside it.
_checkout = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_checkout, "setup.cfg")) and \
        _os.path.isfile(_os.path.join(_checkout, "export", "__init__.py")):
    __path__.append(_checkout)
