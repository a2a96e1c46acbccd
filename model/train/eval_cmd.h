/* model/train/eval_cmd.h - `./train eval`: a checkpoint's loss on a token shard, without training. */
#ifndef FUSEDGPT_EVAL_CMD_H
#define FUSEDGPT_EVAL_CMD_H

/* argv[0] is "eval". Returns the process exit status (0, 1 runtime failure, 2 bad flags). */
int eval_main(int argc, char **argv);

#endif
