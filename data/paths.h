/* data/paths.h - folders on disk. */
#ifndef FUSEDGPT_PATHS_H
#define FUSEDGPT_PATHS_H

#ifdef __cplusplus
extern "C" {
#endif

/* mkdir -p: creates path and its missing parents. 0, or -1 with errno set. */
int make_dirs(const char *path);

#ifdef __cplusplus
}
#endif

#endif
