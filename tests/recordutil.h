/*
 * Helpers of the test programs that read the lifecycle record
 * (test_attached, test_expiry, test_lifecycle): a test's own directories
 * and queries of its record. They assert with Criterion.
 */
#ifndef SBX_RECORDUTIL_H
#define SBX_RECORDUTIL_H

/* A test's directories: @top (fresh, under the caller's TMPDIR), @tmp
 * ("TOP/tmp", exported as TMPDIR) and @state ("TOP/state", exported as
 * SBX_STATE_DIR, made by the library on first use). Strings owned by the
 * struct. */
typedef struct tu_dirs {
    char *top;
    char *tmp;
    char *state;
} tu_dirs;

/* Makes @d's directories with the prefix @prefix and exports TMPDIR and
 * SBX_STATE_DIR. @searchable: TOP and TMP are mode 0711, so a bubblewrap
 * sandbox of a library running as root (uid 65534 inside) passes through
 * them; else TMP is 0700. */
void tu_dirs_make(tu_dirs *d, const char *prefix, int searchable);
/* Removes @d's tree and frees its strings (all NULL after). */
void tu_dirs_free(tu_dirs *d);

/* Runs @sql, a query of one integer, against the record in @state_dir;
 * returns its value. */
long long tu_record_int(const char *state_dir, const char *sql);
/* The first column of @sql's first row, as text, against the record in
 * @state_dir: a new string ("" for NULL); asserts there is a row. */
char *tu_record_text(const char *state_dir, const char *sql);
/* Rows of the record in @state_dir for provider id @id. */
long long tu_record_rows_for(const char *state_dir, const char *id);

/* Every row of the record in @state_dir, one per line ("token provider_id
 * detached=0|1 owners=pid,..."), for a failure message. Free with free(). */
char *tu_record_dump(const char *state_dir);

#endif
