/* model/train/sample_cmd.h - `./train sample`: text from a checkpoint, without training. */
#ifndef FUSEDGPT_SAMPLE_CMD_H
#define FUSEDGPT_SAMPLE_CMD_H

/* argv[0] is "sample". Returns the process exit status (0, 1 runtime failure, 2 bad flags). */
int sample_main(int argc, char **argv);

#endif
