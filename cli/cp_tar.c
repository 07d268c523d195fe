/*
 * sbx cp with "-": a tar stream on stdin (to the sandbox) or stdout (from
 * it), as docker cp does (cli.h). The stream goes through a private
 * staging directory on this host, removed in every case (also when a
 * stop signal ends sbx while a transfer ignores its cancellation).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <archive.h>
#include <archive_entry.h>

#include "cli.h"

/* Removes the staging directory @arg (a path) and all in it. */
static void remove_staging(void *arg)
{
    cli_remove_tree((const char *)arg);
}

/* A new private staging directory (new string), NULL after reporting. */
static char *make_staging(void)
{
    const char *base = getenv("TMPDIR");
    char *dir;

    if (base == NULL || *base == '\0')
        base = "/tmp";
    if (asprintf(&dir, "%s/sbx-cp-XXXXXX", base) < 0) {
        cli_out_of_memory();
        return NULL;
    }
    if (mkdtemp(dir) == NULL) {
        cli_msg("cannot make a staging directory in %s: %s", base, strerror(errno));
        free(dir);
        return NULL;
    }
    return dir;
}

/* Runs one transfer between @sandbox_path and @local_path; the staging
 * directory @staging goes if sbx has to leave the call. Returns 0 or the
 * exit status (reported). */
static int transfer(cli_call_kind kind, sbx_sandbox *sandbox, const char *sandbox_path,
                    const char *local_path, char *staging)
{
    cli_call call = { .kind = kind, .what = "the copy", .sandbox = sandbox,
                      .sandbox_path = sandbox_path, .local_path = local_path,
                      .cleanup = remove_staging, .cleanup_arg = staging };
    cli_outcome o;
    int status = cli_call_run(&call, &o);

    if (status != 0)
        return status;
    if (o.error != NULL)
        return cli_outcome_fail(&o);
    cli_outcome_clear(&o);
    return 0;
}

/* The last component of @path without trailing slashes (new string); "."
 * for "/" or "". */
static char *last_component(const char *path)
{
    size_t len = strlen(path);
    const char *start;

    while (len > 1 && path[len - 1] == '/')
        len--;
    start = path + len;
    while (start > path && start[-1] != '/')
        start--;
    if (start == path + len || (len == 1 && path[0] == '/'))
        return strdup(".");
    return strndup(start, (size_t)(path + len - start));
}

/* Writes the tree @root (under @staging; its entries named from @name) as
 * a tar stream to stdout. Returns 0 or CLI_EXIT_TOOL (reported). */
static int write_tar(const char *staging, const char *name)
{
    struct archive *disk = archive_read_disk_new(), *out = archive_write_new();
    struct archive_entry *entry;
    size_t skip = strlen(staging) + 1;
    char *root = NULL, buf[65536];
    int status = CLI_EXIT_TOOL, r;

    if (disk == NULL || out == NULL || asprintf(&root, "%s/%s", staging, name) < 0) {
        root = NULL;
        cli_out_of_memory();
        goto out;
    }
    archive_read_disk_set_standard_lookup(disk);
    archive_read_disk_set_behavior(disk, ARCHIVE_READDISK_NO_TRAVERSE_MOUNTS);
    if (archive_write_set_format_pax_restricted(out) != ARCHIVE_OK ||
        archive_write_open_fd(out, STDOUT_FILENO) != ARCHIVE_OK ||
        archive_read_disk_open(disk, root) != ARCHIVE_OK) {
        cli_msg("cannot write the tar stream: %s", archive_error_string(out) != NULL
                ? archive_error_string(out) : archive_error_string(disk));
        goto out;
    }
    for (;;) {
        entry = archive_entry_new();
        r = archive_read_next_header2(disk, entry);
        if (r == ARCHIVE_EOF) {
            archive_entry_free(entry);
            break;
        }
        if (r != ARCHIVE_OK) {
            cli_msg("cannot read %s: %s", root, archive_error_string(disk));
            archive_entry_free(entry);
            goto out;
        }
        archive_read_disk_descend(disk);
        /* Named from the copied entry, not from the staging directory. */
        archive_entry_copy_pathname(entry, archive_entry_pathname(entry) + skip);
        if (archive_write_header(out, entry) != ARCHIVE_OK) {
            cli_msg("cannot write the tar stream: %s", archive_error_string(out));
            archive_entry_free(entry);
            goto out;
        }
        if (archive_entry_filetype(entry) == AE_IFREG && archive_entry_size(entry) > 0) {
            int fd = open(archive_entry_sourcepath(entry), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
            ssize_t n;

            if (fd < 0) {
                cli_msg("cannot read %s: %s", archive_entry_sourcepath(entry), strerror(errno));
                archive_entry_free(entry);
                goto out;
            }
            while ((n = read(fd, buf, sizeof buf)) > 0)
                if (archive_write_data(out, buf, (size_t)n) != n) {
                    cli_msg("cannot write the tar stream: %s", archive_error_string(out));
                    close(fd);
                    archive_entry_free(entry);
                    goto out;
                }
            close(fd);
        }
        archive_entry_free(entry);
    }
    if (archive_write_close(out) != ARCHIVE_OK) {
        cli_msg("cannot write the tar stream: %s", archive_error_string(out));
        goto out;
    }
    status = 0;
out:
    if (disk != NULL)
        archive_read_free(disk);
    if (out != NULL)
        archive_write_free(out);
    free(root);
    return status;
}

int cli_cp_tar_out(sbx_sandbox *sandbox, const char *src_path, int is_dir)
{
    char *staging = make_staging(), *name = NULL, *local = NULL;
    int status = CLI_EXIT_TOOL;

    if (staging == NULL)
        return CLI_EXIT_TOOL;
    name = last_component(src_path);
    if (name == NULL || asprintf(&local, "%s/%s", staging, name) < 0) {
        local = NULL;
        cli_out_of_memory();
        goto out;
    }
    status = transfer(is_dir ? CLI_CALL_DOWNLOAD_DIR : CLI_CALL_DOWNLOAD_FILE, sandbox,
                      src_path, local, staging);
    if (status == 0)
        status = write_tar(staging, name);
out:
    remove_staging(staging);
    free(local);
    free(name);
    free(staging);
    return status;
}

/* 1 when tar entry name @p may be extracted under the staging directory:
 * relative, without a ".." component. */
static int safe_name(const char *p)
{
    const char *c;

    if (p == NULL || *p == '\0' || *p == '/')
        return 0;
    for (c = p; *c != '\0';) {
        size_t n = strcspn(c, "/");

        if (n == 2 && c[0] == '.' && c[1] == '.')
            return 0;
        c += n;
        while (*c == '/')
            c++;
    }
    return 1;
}

/* Extracts the tar stream on stdin into @staging. Returns 0 or
 * CLI_EXIT_TOOL (reported, naming a refused entry). */
static int extract_stdin(const char *staging)
{
    struct archive *in = archive_read_new(), *disk = archive_write_disk_new();
    struct archive_entry *entry;
    char *name = NULL;
    int status = CLI_EXIT_TOOL, r = ARCHIVE_EOF;

    if (in == NULL || disk == NULL) {
        cli_out_of_memory();
        goto out;
    }
    archive_read_support_format_tar(in);
    archive_read_support_format_gnutar(in);
    archive_read_support_filter_all(in);
    archive_write_disk_set_options(disk, ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                                   ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                   ARCHIVE_EXTRACT_SECURE_NODOTDOT);
    /* Names are checked here (safe_name) and then made absolute under the
     * staging directory, so libarchive's own absolute-path refusal is not
     * asked for. */
    if (archive_read_open_fd(in, STDIN_FILENO, 65536) != ARCHIVE_OK) {
        cli_msg("cannot read the tar stream on stdin: %s", archive_error_string(in));
        goto out;
    }
    while ((r = archive_read_next_header(in, &entry)) == ARCHIVE_OK && cli_signal == 0) {
        const char *link = archive_entry_hardlink(entry);
        char *path = NULL, *target = NULL;

        free(name);
        name = strdup(archive_entry_pathname(entry) != NULL ? archive_entry_pathname(entry)
                                                            : "");
        if (name == NULL) {
            cli_out_of_memory();
            goto out;
        }
        if (!safe_name(name) || (link != NULL && !safe_name(link))) {
            cli_msg("refusing tar entry \"%s\" on stdin: an absolute name or one with \"..\"",
                    name);
            goto out;
        }
        if (asprintf(&path, "%s/%s", staging, name) < 0 ||
            (link != NULL && asprintf(&target, "%s/%s", staging, link) < 0)) {
            free(path);
            cli_out_of_memory();
            goto out;
        }
        archive_entry_copy_pathname(entry, path);
        if (target != NULL)
            archive_entry_copy_hardlink(entry, target);
        free(path);
        free(target);
        if (archive_write_header(disk, entry) != ARCHIVE_OK) {
            cli_msg("cannot extract \"%s\" from the tar stream: %s", name,
                    archive_error_string(disk));
            goto out;
        }
        if (archive_entry_size(entry) > 0) {
            const void *block;
            size_t size;
            la_int64_t offset;

            while ((r = archive_read_data_block(in, &block, &size, &offset)) == ARCHIVE_OK)
                if (archive_write_data_block(disk, block, size, offset) != ARCHIVE_OK) {
                    cli_msg("cannot extract \"%s\": %s", name, archive_error_string(disk));
                    goto out;
                }
            if (r != ARCHIVE_EOF) {
                cli_msg("cannot read the tar stream on stdin: %s", archive_error_string(in));
                goto out;
            }
        }
        if (archive_write_finish_entry(disk) != ARCHIVE_OK) {
            cli_msg("cannot extract \"%s\": %s", name, archive_error_string(disk));
            goto out;
        }
    }
    if (cli_signal != 0)
        goto out;
    if (r != ARCHIVE_EOF) {
        cli_msg("cannot read the tar stream on stdin: %s", archive_error_string(in));
        goto out;
    }
    if (archive_write_close(disk) != ARCHIVE_OK) {
        cli_msg("cannot extract the tar stream: %s", archive_error_string(disk));
        goto out;
    }
    status = 0;
out:
    free(name);
    if (in != NULL)
        archive_read_free(in);
    if (disk != NULL)
        archive_write_free(disk);
    return status;
}

int cli_cp_tar_in(sbx_sandbox *sandbox, const char *dst_path)
{
    char *staging = make_staging();
    int status;

    if (staging == NULL)
        return CLI_EXIT_TOOL;
    status = extract_stdin(staging);
    if (status == 0)
        status = transfer(CLI_CALL_UPLOAD_DIR, sandbox, dst_path, staging, staging);
    remove_staging(staging);
    free(staging);
    return status;
}
