"""Fast paths for mxformats, installed as ``mxformats.kernels``.

The Triton and HIP kernels live here. Every kernel must equal the numpy reference in
``mxformats`` bit for bit: same function names and signatures, and the tests compare
raw codes, never with a tolerance. The kernels land in later issues; this package is
empty until then.
"""
