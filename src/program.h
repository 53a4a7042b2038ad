/* SPDX-License-Identifier: MIT */
/* src/program.h: the program a job runs: an executable found as execvp() would, or python. */
#ifndef CRUN_SRC_PROGRAM_H
#define CRUN_SRC_PROGRAM_H

#include <stdbool.h>

#include "agent/jobspec.h"
#include "src/common/diag.h"

/**
 * How @name (borrowed) runs: -m (@module) makes it a Python module, --no-python an executable
 * even when it ends in .py, --run-path or a ".py" name a Python file; anything else is an
 * executable. The flags are assumed consistent (the command line rejects the pairs that clash).
 */
enum program_kind program_kind_of(const char *name, bool module, bool no_python, bool run_path);

/**
 * Check, before anything starts, that @name (borrowed) can run as @spec->program_kind:
 * - PROGRAM_EXEC: found as execvp() would (a name with a '/' as is, else along $PATH, a
 *   missing $PATH meaning glibc's default); spec->program becomes the path found.
 * - PROGRAM_PYTHON, PROGRAM_MODULE: $PYTHON_EXEC, when set and not empty, replaces
 *   spec->python_exec (the default "python3", or --python), which must then be found the same
 *   way: spec->python_path becomes the path found, what workers run. When neither it nor
 *   --python chose (@python_chosen false), the interpreter of the first `torchrun` on $PATH
 *   (its #! line, or pip's "'''exec' PYTHON" form) wins over the first python3 on $PATH: it
 *   is the one that imports torch.distributed.run, as torchrun's workers run under the
 *   python torchrun runs in. A Python file must also be a readable regular file.
 *   spec->program becomes a copy of @name.
 * @hint adds a shell's advice to an executable's errors ("use ./NAME", "chmod +x it, or use
 * --run-path"): pass it unless --no-python was given.
 *
 * Returns 0; CRUN_ECONFIG with "program NAME: why" or "python interpreter NAME: why" in @d
 * (NAME cut to 48 bytes, non-printables as '?'); or -ENOMEM ("out of memory").
 */
int program_resolve(struct job_spec *spec, const char *name, bool hint, bool python_chosen,
		    struct crun_diag *d);

#endif
