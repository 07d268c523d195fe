/*
 * progress.h — the progress of an image pull, from the JSON stream that
 * POST /images/create answers (one JSON object per line), as one summary
 * line: layers done of layers seen, bytes downloaded of bytes known.
 *
 * Self-contained (json-c only, no host services), so that the tests build
 * it on its own. Not thread-safe: one pull, one state.
 */
#ifndef SBX_DOCKER_PROGRESS_H
#define SBX_DOCKER_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

/** One layer of the image, by the id the stream gives it. */
typedef struct dk_pull_layer {
    char id[72];
    int64_t current;            /* bytes downloaded */
    int64_t total;              /* its size in bytes; 0 while unknown */
    int done;                   /* "Pull complete" or "Already exists" */
    int present;                /* "Already exists": nothing to download */
} dk_pull_layer;

typedef struct dk_pull_progress {
    const char *image;          /* borrowed: named in the line */
    dk_pull_layer *layers;
    size_t count, cap;
    char line[256];             /* the summary line (no newline) */
} dk_pull_progress;

/**
 * Takes in one line of the pull stream (a JSON object; anything else is
 * ignored). Layer lines ("Pulling fs layer", "Waiting", "Downloading" with
 * progressDetail current/total, "Verifying Checksum", "Download complete",
 * "Extracting", "Pull complete", "Already exists") update their layer;
 * other lines (the "Pulling from" line, whose id is the tag, "Digest:",
 * "Status:") change nothing. Returns 1 when the summary line changed
 * (p->line holds it), 0 when not, -1 when memory ran out.
 *
 * The line: "pulling IMAGE: D/N layers, X of Y" where D counts the layers
 * done, N those seen, X the bytes downloaded and Y the bytes of the
 * layers whose size is known (", X of Y" left out while Y is 0), bytes
 * in decimal units as docker shows them: "512 B", "12.3 kB", "3.4 MB",
 * "1.25 GB".
 */
int dk_pull_progress_feed(dk_pull_progress *p, const char *json_line);

/** Writes @bytes in the units above into @buf (at least 16 bytes). */
void dk_pull_progress_bytes(int64_t bytes, char *buf, size_t size);

/** Frees the layers; the state can be used again. */
void dk_pull_progress_clear(dk_pull_progress *p);

#endif /* SBX_DOCKER_PROGRESS_H */
