/* One entry point per subcommand: int cmd_<name>(int argc, char **argv), argv[0] = name.
 * Each returns the process exit code. Argument parsing and printing only; no engine logic. */
#ifndef MLXCEL_CLI_H
#define MLXCEL_CLI_H

int cmd_inspect(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_apply_template(int argc, char **argv);
int cmd_loadtest(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_compare(int argc, char **argv);

#endif
