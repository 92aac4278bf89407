# LLVM lit configuration for the FileCheck tests in tests/ir (*.ir, with the
# generated-code tests in emit/): each `// RUN:` line runs in bash with
# pipefail, after these substitutions:
#   %s, %t, ...   lit's own (the test file, a scratch path for this test)
#   stepjit-opt   this build's tools/stepjit-opt
#   FileCheck, not, split-file   LLVM 14's (llvm-14-tools)
# The paths come from lit.site.cfg.py, which CMake writes into the build
# directory (tests/ir/CMakeLists.txt); ctest runs each test file on its own:
#   python3 /usr/lib/llvm-14/build/utils/lit/lit.py -sv build/tests/ir/fuse.ir
# or the whole suite: ... lit.py -sv build/tests/ir
import os
import re
import shutil

import lit.formats

if not hasattr(config, 'stepjit_opt'):
    lit_config.fatal('run lit on the build directory (build/tests/ir), whose '
                     'lit.site.cfg.py names the tools to test')

config.name = 'stepjit'
# An external shell: RUN lines use bash ($?, `test`, `;`).
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = ['.ir']
config.test_source_root = os.path.dirname(__file__)
# Inputs of the check_opt.cmake cases in CMakeLists.txt, not lit tests.
config.excludes = ['roundtrip.ir', 'parse_error.ir', 'verify_error.ir']

# `// REQUIRES: graphviz` tests run Graphviz's `dot`; without it they are
# reported UNSUPPORTED (and pass under ctest).
if shutil.which('dot'):
    config.available_features.add('graphviz')

# A tool name is replaced where it stands as a command word, not inside a
# path, a flag or another name (a CHECK prefix, `--passes=...`).
for name, path in [('stepjit-opt', config.stepjit_opt),
                   ('FileCheck', config.filecheck),
                   ('split-file', config.split_file),
                   ('not', config.not_tool)]:
    config.substitutions.append(
        (r'(?<![-\w./=])' + re.escape(name) + r'(?![-\w.])', path))

# The environment is lit's clean one, so the user's STEPJIT_* settings do not
# leak into tests; OpenBLAS's core type is kept as the machine sets it.
for var in ['OPENBLAS_CORETYPE']:
    if var in os.environ:
        config.environment[var] = os.environ[var]
