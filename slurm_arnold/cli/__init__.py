"""The commands: ``arnold`` (``main``, one module per command group, each imported only when
invoked), ``arnold-sbatch`` (``sbatch``) and ``arnold-prolog`` (``prolog``). Each is a thin
layer over the library: it parses options (shared ones in ``options``), calls one function of
the product, and turns its typed errors into one line and an exit code. Nothing is imported
here, so each entry point pays only for its own module."""
