/*
 * The state store of the sbx tool and id resolution (cli.h).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "cli.h"

/* ---------------------------------------------------------- state store */

/*
 * Sandboxes made by `sbx create` outlive sbx: each id maps to its session
 * state (sbx_sandbox_session_state()) in the user's state directory,
 *
 *   ${SBX_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/sbx}/sandboxes/ID.json
 *
 * as {"created":"2025-01-02T03:04:05Z","state":{...}}. The directories sbx
 * makes are 0700 and the files 0600; a file is written to a temporary name
 * in the same directory, synced and renamed into place, so a reader sees a
 * whole file or none.
 *
 * A record decides what `sbx rm` destroys, so the state is used only when
 * no other user can have planted it (cli_state_dir_open, check_state_file):
 * the sbx directory, sandboxes/ and each record are the effective user's,
 * a real directory or regular file, not writable by group or others; every
 * existing parent above is the user's or root's and not writable by group
 * or others unless sticky. Anything else is a configuration error naming
 * the path, its owner and its mode, and that state is not used at all.
 */

/* Largest state file read (a session state is a few hundred bytes). */
#define STATE_FILE_MAX (1 << 20)

/* 1 when @id can name a state file (and a `cp` operand): [A-Za-z0-9_.-],
 * starting with a letter or digit, at most 200 bytes. */
int cli_id_valid(const char *id)
{
    size_t i;

    if (!isalnum((unsigned char)id[0]))
        return 0;
    for (i = 0; id[i] != '\0'; i++)
        if (i >= 200 || !(isalnum((unsigned char)id[i]) || strchr("_.-", id[i])))
            return 0;
    return 1;
}

/* The directory sbx owns (new string; sbx_state_dir_path()); NULL when
 * no base directory can be found (reported). */
static char *state_base(void)
{
    sbx_error *err = NULL;
    char *dir = sbx_state_dir_path(&err);

    if (dir == NULL) {
        cli_msg("%s", err != NULL ? sbx_error_get0_message(err) : "out of memory");
        sbx_error_free(err);
    }
    return dir;
}

/* "uid N (NAME)" of @uid into @buf. */
static const char *uid_text(uid_t uid, char *buf, size_t size)
{
    struct passwd *pw = getpwuid(uid);

    if (pw != NULL)
        snprintf(buf, size, "uid %u (%s)", (unsigned)uid, pw->pw_name);
    else
        snprintf(buf, size, "uid %u", (unsigned)uid);
    return buf;
}

/*
 * Reports that @what @path (the state directory or file; @parent, when not
 * NULL, the ancestor of it that is wrong) is refused because of @st, and
 * what it must be instead. @need says what the rule is.
 */
static void refuse_state_path(const char *what, const char *path, const char *parent,
                              const struct stat *st, const char *need)
{
    char owner[160], me[160];

    uid_text(st->st_uid, owner, sizeof owner);
    uid_text(geteuid(), me, sizeof me);
    if (parent != NULL)
        cli_msg("refusing the %s %s: its parent %s is owned by %s and has mode %04o; "
            "it must be owned by %s%s and not writable by group or others "
            "unless sticky [code=configuration]", what, path, parent, owner,
            (unsigned)(st->st_mode & 07777), me, geteuid() == 0 ? "" : " or uid 0 (root)");
    else if (S_ISLNK(st->st_mode))
        cli_msg("refusing the %s %s: it is a symbolic link; it must be %s owned by %s and "
            "not writable by group or others [code=configuration]", what, path, need, me);
    else
        cli_msg("refusing the %s %s: it is owned by %s and has mode %04o; it must be %s owned "
            "by %s and not writable by group or others [code=configuration]", what, path,
            owner, (unsigned)(st->st_mode & 07777), need, me);
}

/*
 * Checks (and with @create makes, 0700) one directory sbx owns: a real
 * directory (not a symlink), owned by the effective user, not writable by
 * group or others; one that is merely readable by others is made 0700.
 * Returns 1, 0 when it does not exist and !@create, or -1 (reported).
 */
static int own_dir(const char *path, int create)
{
    struct stat st;

    if (lstat(path, &st) < 0) {
        if (errno != ENOENT) {
            cli_msg("cannot use the state directory %s: %s", path, strerror(errno));
            return -1;
        }
        if (!create)
            return 0;
        if (mkdir(path, 0700) < 0 && errno != EEXIST) {
            cli_msg("cannot create the state directory %s: %s", path, strerror(errno));
            return -1;
        }
        if (lstat(path, &st) < 0) {
            cli_msg("cannot use the state directory %s: %s", path, strerror(errno));
            return -1;
        }
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022) != 0) {
        refuse_state_path("state directory", path, NULL, &st, "a directory");
        return -1;
    }
    if ((st.st_mode & 07777) != 0700 && chmod(path, 0700) < 0) {
        cli_msg("cannot make the state directory %s private: %s", path, strerror(errno));
        return -1;
    }
    return 1;
}

/*
 * The directory holding the state files (new string in *@dir), checked:
 * every existing ancestor of the directory sbx owns is owned by the user
 * or root and not writable by group or others unless sticky (as /tmp);
 * the directory sbx owns and its sandboxes/ are the user's own, private
 * (see own_dir). With @create, what is missing is made 0700. Returns 1;
 * 0 when the directory does not exist and !@create (nothing recorded);
 * -1 (reported, a configuration error naming the path, its owner and
 * mode).
 */
int cli_state_dir_open(int create, char **dir)
{
    char *base = state_base(), *p;
    struct stat st;
    int r = -1;

    *dir = NULL;
    if (base == NULL)
        return -1;
    /* The ancestors: none may let another user swap what is below. */
    for (p = base + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        if (stat(base, &st) == 0) {
            if (!S_ISDIR(st.st_mode)) {
                cli_msg("cannot use the state directory: %s is not a directory", base);
                goto out;
            }
            if ((st.st_uid != 0 && st.st_uid != geteuid()) ||
                ((st.st_mode & 022) != 0 && !(st.st_mode & S_ISVTX))) {
                char *full = NULL;

                *p = '/';
                if (asprintf(&full, "%s/sandboxes", base) < 0)
                    full = NULL;
                *p = '\0';
                refuse_state_path("state directory", full ? full : "", base, &st, NULL);
                free(full);
                goto out;
            }
        } else if (errno != ENOENT) {
            cli_msg("cannot use the state directory %s: %s", base, strerror(errno));
            goto out;
        } else if (!create) {
            r = 0;
            goto out;
        } else if (mkdir(base, 0700) < 0 && errno != EEXIST) {
            cli_msg("cannot create the state directory %s: %s", base, strerror(errno));
            goto out;
        }
        *p = '/';
    }
    r = own_dir(base, create);
    if (r <= 0)
        goto out;
    if (asprintf(dir, "%s/sandboxes", base) < 0) {
        *dir = NULL;
        cli_msg("out of memory");
        r = -1;
        goto out;
    }
    r = own_dir(*dir, create);
    if (r <= 0) {
        free(*dir);
        *dir = NULL;
    }
out:
    free(base);
    return r;
}

/* Checks the state file open on @fd (@path, for messages): a regular
 * file of the effective user, not writable by group or others, at most
 * STATE_FILE_MAX bytes. Returns 0 or -1 (reported). */
static int check_state_file(int fd, const char *path, struct stat *st)
{
    if (fstat(fd, st) < 0) {
        cli_msg("cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st->st_mode) || st->st_uid != geteuid() || (st->st_mode & 022) != 0) {
        refuse_state_path("state file", path, NULL, st, "a regular file");
        return -1;
    }
    if (st->st_size > STATE_FILE_MAX) {
        cli_msg("%s is not a sandbox record (larger than %d bytes)", path, STATE_FILE_MAX);
        return -1;
    }
    return 0;
}

/* Syncs directory @dir (after a rename or unlink in it); errors ignored. */
static void sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Writes all of @len bytes of @data to @fd. Returns 0 or -1 (errno). */
static int write_fd_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The current time as ISO 8601 UTC ("2025-01-02T03:04:05Z"). */
void cli_iso8601_now(char out[32])
{
    time_t now = time(NULL);
    struct tm tm;

    gmtime_r(&now, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/*
 * Writes the record document @doc of sandbox @id atomically (a temporary
 * file, synced, renamed into place); with !@replace never over the record
 * of another sandbox with the same id. Returns 0 or -1 (reported).
 */
static int store_doc(const char *id, json_object *doc, int replace)
{
    char *dir = NULL, *path = NULL, *tmp = NULL;
    const char *text;
    int fd = -1, rc = -1;

    text = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN |
                                               JSON_C_TO_STRING_NOSLASHESCAPE);
    if (cli_state_dir_open(1, &dir) < 0)
        goto out;
    if (asprintf(&path, "%s/%s.json", dir, id) < 0 ||
        asprintf(&tmp, "%s/.%s.json.XXXXXX", dir, id) < 0) {
        path = tmp = NULL;
        cli_msg("out of memory");
        goto out;
    }
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        cli_msg("cannot write in the state directory %s: %s", dir, strerror(errno));
        free(tmp);
        tmp = NULL;
        goto out;
    }
    if (fchmod(fd, 0600) < 0 || write_fd_all(fd, text, strlen(text)) < 0 ||
        write_fd_all(fd, "\n", 1) < 0 || fsync(fd) < 0) {
        cli_msg("cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    if (close(fd) < 0) {
        fd = -1;
        cli_msg("cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    fd = -1;
    if (replace) {
        if (rename(tmp, path) < 0) {
            cli_msg("cannot update the record %s: %s", path, strerror(errno));
            goto out;
        }
    } else if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) < 0) {
        int e = errno;

        /* A file system without RENAME_NOREPLACE: link() does not
         * replace either. */
        if ((e == EINVAL || e == ENOSYS) && link(tmp, path) == 0) {
            unlink(tmp);
        } else {
            if (e == EINVAL || e == ENOSYS)
                e = errno;
            if (e == EEXIST)
                cli_msg("a sandbox with id %s is already recorded in %s", id, dir);
            else
                cli_msg("cannot record the sandbox in %s: %s", path, strerror(e));
            goto out;
        }
    }
    free(tmp);
    tmp = NULL;
    sync_dir(dir);
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    if (tmp != NULL) {
        unlink(tmp);
        free(tmp);
    }
    free(path);
    free(dir);
    return rc;
}

/*
 * Records the session state @state (JSON text) of sandbox @id, created at
 * @created, with the members of @meta (borrowed; may be NULL): written
 * atomically, never replacing the record of another sandbox with the same
 * id. Returns 0 or -1 (reported).
 */
int cli_state_store(const char *id, const char *created, const char *state,
                    json_object *meta)
{
    json_object *doc, *st;
    int rc;

    if (!cli_id_valid(id)) {
        cli_msg("cannot record sandbox id \"%s\" (not usable as a file name)", id);
        return -1;
    }
    st = json_tokener_parse(state);
    if (st == NULL) {
        cli_msg("the session state of %s is not JSON", id);
        return -1;
    }
    doc = json_object_new_object();
    if (doc == NULL) {
        json_object_put(st);
        cli_msg("out of memory");
        return -1;
    }
    json_object_object_add(doc, "created", json_object_new_string(created));
    json_object_object_add(doc, "state", st);
    if (meta != NULL) {
        json_object_object_foreach(meta, key, value)
            json_object_object_add(doc, key, json_object_get(value));
    }
    rc = store_doc(id, doc, 0);
    json_object_put(doc);
    return rc;
}

/* Rewrites the record @rec with "stopped" set to @stopped (the member goes
 * when 0). Returns 0 or -1 (reported). */
int cli_state_set_stopped(const cli_record *rec, int stopped)
{
    json_object *doc = json_object_new_object(), *st = json_tokener_parse(rec->state);
    int rc;

    if (doc == NULL || st == NULL) {
        json_object_put(doc);
        json_object_put(st);
        cli_msg("out of memory");
        return -1;
    }
    json_object_object_add(doc, "created", json_object_new_string(rec->created));
    json_object_object_add(doc, "state", st);
    if (rec->expires != NULL)
        json_object_object_add(doc, "expires", json_object_new_string(rec->expires));
    if (rec->options != NULL)
        json_object_object_add(doc, "options", json_tokener_parse(rec->options));
    if (rec->name != NULL)
        json_object_object_add(doc, "name", json_object_new_string(rec->name));
    if (stopped)
        json_object_object_add(doc, "stopped", json_object_new_boolean(1));
    rc = store_doc(rec->id, doc, 1);
    json_object_put(doc);
    return rc;
}

void cli_record_clear(cli_record *r)
{
    free(r->name);
    free(r->expires);
    free(r->options);
    free(r->id);
    free(r->created);
    free(r->backend);
    free(r->state);
    memset(r, 0, sizeof *r);
}

/*
 * Reads the record of @id. Returns 0; 1 when there is none (nothing
 * reported); -1 when it cannot be read or is malformed (reported, naming
 * the file).
 */
int cli_state_load(const char *id, cli_record *rec)
{
    char *dir = NULL, *path = NULL, *buf = NULL;
    json_object *doc = NULL, *st, *created, *backend, *v;
    struct stat sb;
    size_t len = 0;
    int fd = -1, rc = -1;

    memset(rec, 0, sizeof *rec);
    if (!cli_id_valid(id))
        return 1;
    rc = cli_state_dir_open(0, &dir);
    if (rc <= 0)
        return rc < 0 ? -1 : 1;
    rc = -1;
    if (asprintf(&path, "%s/%s.json", dir, id) < 0) {
        path = NULL;
        cli_msg("out of memory");
        goto out;
    }
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            rc = 1;
            goto out;
        }
        cli_msg("cannot read %s: %s", path, strerror(errno));
        goto out;
    }
    if (check_state_file(fd, path, &sb) < 0)
        goto out;
    buf = malloc((size_t)sb.st_size + 1);
    if (buf == NULL) {
        cli_msg("out of memory");
        goto out;
    }
    while (len < (size_t)sb.st_size) {
        ssize_t n = read(fd, buf + len, (size_t)sb.st_size - len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    doc = json_tokener_parse(buf);
    if (doc == NULL || !json_object_is_type(doc, json_type_object) ||
        !json_object_object_get_ex(doc, "state", &st) ||
        !json_object_is_type(st, json_type_object) ||
        !json_object_object_get_ex(doc, "created", &created) ||
        !json_object_is_type(created, json_type_string) ||
        !json_object_object_get_ex(st, "backend", &backend) ||
        !json_object_is_type(backend, json_type_string)) {
        cli_msg("%s is malformed (remove it to forget sandbox %s)", path, id);
        goto out;
    }
    rec->id = strdup(id);
    rec->created = strdup(json_object_get_string(created));
    rec->backend = strdup(json_object_get_string(backend));
    rec->state = strdup(json_object_to_json_string_ext(st, JSON_C_TO_STRING_PLAIN |
                                                           JSON_C_TO_STRING_NOSLASHESCAPE));
    if (json_object_object_get_ex(doc, "name", &v) && json_object_is_type(v, json_type_string))
        rec->name = strdup(json_object_get_string(v));
    if (json_object_object_get_ex(doc, "expires", &v) && json_object_is_type(v, json_type_string))
        rec->expires = strdup(json_object_get_string(v));
    rec->stopped = json_object_object_get_ex(doc, "stopped", &v) &&
                   json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v);
    if (json_object_object_get_ex(doc, "options", &v) && json_object_is_type(v, json_type_object))
        rec->options = strdup(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN |
                                                              JSON_C_TO_STRING_NOSLASHESCAPE));
    if (!rec->id || !rec->created || !rec->backend || !rec->state ||
        (json_object_object_get_ex(doc, "name", &v) && rec->name == NULL &&
         json_object_is_type(v, json_type_string))) {
        cli_record_clear(rec);
        cli_msg("out of memory");
        goto out;
    }
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    json_object_put(doc);
    free(buf);
    free(path);
    free(dir);
    return rc;
}

/* Removes the record of @id. Returns 0 or -1 (reported). */
int cli_state_forget(const char *id)
{
    char *dir = NULL, *path = NULL;
    int rc = cli_state_dir_open(0, &dir);

    if (rc <= 0)
        return rc;
    rc = 0;
    if (asprintf(&path, "%s/%s.json", dir, id) < 0) {
        free(dir);
        cli_msg("out of memory");
        return -1;
    }
    if (unlink(path) < 0 && errno != ENOENT) {
        cli_msg("cannot forget sandbox %s: %s: %s", id, path, strerror(errno));
        rc = -1;
    } else {
        sync_dir(dir);
    }
    free(path);
    free(dir);
    return rc;
}

/*
 * Reattaches to the recorded sandbox @ref (resolved by cli_resolve_record).
 * Returns it, or NULL after reporting why: what cli_resolve_record reports
 * when @ref names no single record, the
 * library's error otherwise (stored in *@gone_error instead of reported
 * when it is not_found and @gone_error is not NULL).
 */
sbx_sandbox *cli_sandbox_open(const char *ref, sbx_error **gone_error)
{
    cli_record rec;
    sbx_error *error = NULL;
    sbx_sandbox *sandbox;

    if (cli_resolve_record(ref, &rec) != 0)
        return NULL;
    sandbox = sbx_resume(rec.state, &error);
    cli_record_clear(&rec);
    if (sandbox == NULL) {
        if (gone_error != NULL && error != NULL &&
            sbx_error_get_code(error) == SBX_ERROR_NOT_FOUND)
            *gone_error = error;
        else
            cli_error(error);
    }
    return sandbox;
}

static int record_cmp(const void *a, const void *b)
{
    const cli_record *x = a, *y = b;
    int c = strcmp(x->created, y->created);

    return c != 0 ? c : strcmp(x->id, y->id);
}

int cli_state_list(cli_record **records, size_t *count)
{
    cli_record *recs = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    char *dir;
    DIR *d;
    int r, status = 0;

    *records = NULL;
    *count = 0;
    r = cli_state_dir_open(0, &dir);
    if (r <= 0)
        return r;
    d = opendir(dir);
    if (d == NULL) {
        cli_msg("cannot read the state directory %s: %s", dir, strerror(errno));
        free(dir);
        return -1;
    }
    while (cli_signal == 0 && (de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        char *id;

        if (len <= 5 || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        id = strndup(de->d_name, len - 5);
        if (id == NULL) {
            cli_out_of_memory();
            status = 1;
            break;
        }
        if (!cli_id_valid(id)) {
            free(id);
            continue;
        }
        if (n == cap) {
            cli_record *bigger = realloc(recs, (cap ? cap * 2 : 16) * sizeof *recs);

            if (bigger == NULL) {
                free(id);
                cli_out_of_memory();
                status = 1;
                break;
            }
            recs = bigger;
            cap = cap ? cap * 2 : 16;
        }
        r = cli_state_load(id, &recs[n]);
        free(id);
        if (r == 0)
            n++;
        else if (r < 0)
            status = 1;   /* malformed or refused (reported); the rest is listed */
        /* else gone meanwhile */
    }
    closedir(d);
    free(dir);
    if (n > 1)
        qsort(recs, n, sizeof *recs, record_cmp);
    *records = recs;
    *count = n;
    return status;
}

void cli_state_list_free(cli_record *records, size_t count)
{
    for (size_t i = 0; i < count; i++)
        cli_record_clear(&records[i]);
    free(records);
}

/* ------------------------------------------------------- id resolution */

/*
 * Resolves @ref the way docker resolves a container reference: the record
 * whose id is @ref, else the one whose name is @ref, else the one whose id
 * starts with @ref when exactly one does. Returns 0 with the record in
 * *@rec; 1 when nothing matches ("no such sandbox: REF", reported); 2 when
 * the prefix matches several ("sandbox id prefix \"REF\" is ambiguous:
 * it matches ID1, ID2", reported); -1 when the store cannot be read
 * (reported).
 */
int cli_resolve_record(const char *ref, cli_record *rec)
{
    cli_record *recs = NULL;
    size_t n = 0, i, matches = 0, match = 0;
    int r;

    memset(rec, 0, sizeof *rec);
    r = cli_state_load(ref, rec);
    if (r <= 0)
        return r;
    if (ref[0] == '\0' || !cli_id_valid(ref)) {
        cli_msg("no such sandbox: %s", ref);
        return 1;
    }
    if (cli_state_list(&recs, &n) < 0)
        return -1;
    for (i = 0; i < n; i++)
        if (recs[i].name != NULL && strcmp(recs[i].name, ref) == 0)
            break;
    if (i < n) {
        *rec = recs[i];
        memset(&recs[i], 0, sizeof recs[i]);
        cli_state_list_free(recs, n);
        return 0;
    }
    for (i = 0; i < n; i++)
        if (strncmp(recs[i].id, ref, strlen(ref)) == 0) {
            matches++;
            match = i;
        }
    if (matches == 1) {
        *rec = recs[match];
        memset(&recs[match], 0, sizeof recs[match]);
        cli_state_list_free(recs, n);
        return 0;
    }
    if (matches == 0) {
        cli_msg("no such sandbox: %s", ref);
        r = 1;
    } else {
        size_t len = 0;
        char *list = NULL;

        for (i = 0; i < n; i++) {
            size_t add;

            if (strncmp(recs[i].id, ref, strlen(ref)) != 0)
                continue;
            add = strlen(recs[i].id) + 2;
            char *bigger = realloc(list, len + add + 1);
            if (bigger == NULL) {
                free(list);
                cli_state_list_free(recs, n);
                return cli_out_of_memory(), -1;
            }
            list = bigger;
            snprintf(list + len, add + 1, "%s%s", len ? ", " : "", recs[i].id);
            len += strlen(list + len);
        }
        cli_msg("sandbox id prefix \"%s\" is ambiguous: it matches %s", ref, list);
        free(list);
        r = 2;
    }
    cli_state_list_free(recs, n);
    return r;
}

/* Resolves @ref (cli_resolve_record) to a recorded id (new string in *@id).
 * Returns what cli_resolve_record returns. */
int cli_resolve_id(const char *ref, char **id)
{
    cli_record rec;
    int r = cli_resolve_record(ref, &rec);

    *id = NULL;
    if (r != 0)
        return r;
    *id = rec.id;
    rec.id = NULL;
    cli_record_clear(&rec);
    return 0;
}

/*
 * Whether @name can be given to a new sandbox: a valid id-shaped name
 * (cli_id_valid) that is neither the name nor the id of a recorded
 * sandbox. Returns 0; -1 after reporting why not:
 *   the name "web" is already taken by sandbox sbx-local-AbC123
 */
int cli_name_check(const char *name)
{
    cli_record *recs = NULL;
    size_t n = 0, i;
    int r = 0;

    if (!cli_id_valid(name)) {
        cli_msg("invalid --name value \"%s\": expected 1 to 200 of [A-Za-z0-9_.-], "
                "starting with a letter or digit", name);
        return -1;
    }
    if (cli_state_list(&recs, &n) < 0)
        return -1;
    for (i = 0; i < n && r == 0; i++) {
        if (recs[i].name != NULL && strcmp(recs[i].name, name) == 0) {
            cli_msg("the name \"%s\" is already taken by sandbox %s", name, recs[i].id);
            r = -1;
        } else if (strcmp(recs[i].id, name) == 0) {
            cli_msg("the name \"%s\" is already the id of sandbox %s", name, recs[i].id);
            r = -1;
        }
    }
    cli_state_list_free(recs, n);
    return r;
}

/* 1 when @id is a long hexadecimal id (docker's 64 digits). */
static int is_long_hex(const char *id)
{
    size_t i;

    for (i = 0; id[i] != '\0'; i++)
        if (!isxdigit((unsigned char)id[i]))
            return 0;
    return i > CLI_SHORT_ID_LEN;
}

/* The id to show in a table (cli.h). */
const char *cli_short_id(const char *id, char buf[CLI_SHORT_ID_LEN + 1])
{
    if (!is_long_hex(id))
        return id;
    memcpy(buf, id, CLI_SHORT_ID_LEN);
    buf[CLI_SHORT_ID_LEN] = '\0';
    return buf;
}
