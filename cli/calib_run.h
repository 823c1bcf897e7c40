/* calib_run.h — `calib run` and `calib diff` (calib_run.c), called by cmd_calib.c
 * with argv[0] = "run" / "diff". Exit codes as every cmd_*. */
#ifndef RQ_TOOLS_CALIB_RUN_H
#define RQ_TOOLS_CALIB_RUN_H
int calib_run_main(int argc, char **argv);
int calib_diff_main(int argc, char **argv);
#endif
