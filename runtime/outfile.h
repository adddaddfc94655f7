/* outfile.h: writing an output file (safetensors, AOT packages, --emit text) so that a
 * failure leaves nothing partial behind and nothing is replaced that should be written to.
 *
 *   a regular file, or none yet   written to a temporary file next to it, then renamed onto
 *                                 it (atomic: readers see the old or the new file);
 *   a symbolic link               the same, at the link's final target: the link stays, the
 *                                 file it points to is replaced atomically (a dangling link
 *                                 is refused);
 *   "-"                           standard output, written in place;
 *   a device, FIFO or socket      written in place (`-o /dev/stdout`, a pipe): replacing the
 *                                 node would be wrong, and there is nothing to rename;
 *   a directory                   refused.
 *
 * Every write, the fsync and the close are checked; an error is returned with its message
 * (naming the path) and the temporary file is removed. */
#ifndef FFNC_RUNTIME_OUTFILE_H
#define FFNC_RUNTIME_OUTFILE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
  int fd;
  bool in_place; /* stdout, a device or a FIFO */
  char *target;  /* the file renamed onto (the link's target for a symlink) */
  char *tmp;     /* the temporary file, NULL in place */
  const char *path;
} OutFile;

int outfile_open(OutFile *o, const char *path, char *err, size_t errlen);
int outfile_write(OutFile *o, const void *data, size_t len, char *err, size_t errlen);
/* Syncs, closes and renames into place; on failure removes the temporary file. */
int outfile_commit(OutFile *o, char *err, size_t errlen);
/* Gives up: removes the temporary file (nothing is left that we created). */
void outfile_abort(OutFile *o);

/* open, write, commit in one. */
int outfile_save(const char *path, const void *data, size_t len, char *err, size_t errlen);

#endif
