"""The package's one compiled module (everything else is in pyproject.toml): the C renderer of whole-record
HTTP pages (api/http/_record_json.pyx), built by `pip install` with Cython and the system's C compiler. It is
optional: without a compiler the install goes on and api/http/message_json.py renders pages in Python."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(ext_modules=cythonize([Extension("api.http._record_json", ["api/http/_record_json.pyx"],
                                       extra_compile_args=["-O2"], optional=True)],
                            compiler_directives={"language_level": "3"}))
