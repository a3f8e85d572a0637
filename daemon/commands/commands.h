/* exld's subcommands.  Each takes argc/argv with argv[0] the subcommand name
 * and returns the process exit status. */
#ifndef EXL_COMMANDS_H
#define EXL_COMMANDS_H

int exl_cmd_inspect(int argc, char **argv);
int exl_cmd_tokenize(int argc, char **argv);
int exl_cmd_detokenize(int argc, char **argv);
int exl_cmd_chat_template(int argc, char **argv);
int exl_cmd_run(int argc, char **argv);
int exl_cmd_embed(int argc, char **argv);
int exl_cmd_serve(int argc, char **argv); /* the daemon itself */

#endif
