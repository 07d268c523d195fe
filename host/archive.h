/*
 * host/archive.h — tar streams and paths beneath a directory.
 *
 * The one tar path of the project, built as the static helper library
 * sdk/libsbx-sdk-tar (a libtool convenience library) that libsbx
 * (host/files.c: upload_dir, download_dir, sbx_extract_tar_fd) and every
 * plugin with file slots (local, bubblewrap, safehouse: their file slots;
 * docker: its archive endpoints) link into themselves: this code depends
 * only on <sbx/plugin.h>, libarchive and libc, and makes its errors through
 * the sbx_host_services the caller passes, never through host internals.
 * Entry names are bytes, whatever the process's locale.
 *
 * Everything works on descriptors relative to a base directory and never
 * passes through a symlink it was not allowed to follow: openat2() with
 * RESOLVE_BENEATH when the kernel has it (Linux 5.6+, checked at run time),
 * else a component-by-component walk with O_NOFOLLOW that follows symlinks
 * itself. Memory stays bounded whatever the size of the data.
 */
#ifndef SBX_HOST_ARCHIVE_H
#define SBX_HOST_ARCHIVE_H

#include <stdint.h>
#include <sys/types.h>

#include <sbx/plugin.h>

/** What sbx_tar_extract does with a symlink whose target is absolute or
 *  leaves the destination (the values of <sbx/sbx.h>'s
 *  sbx_outside_symlinks). */
#define SBX_TAR_SYMLINKS_KEEP 0     /* made as it is; never followed */
#define SBX_TAR_SYMLINKS_SKIP 1     /* left out, with a note */
#define SBX_TAR_SYMLINKS_REFUSE 2   /* the whole stream refused */

/** The extractor's bounds when a policy leaves them 0 (the values of
 *  <sbx/sbx.h>'s SBX_EXTRACT_DEFAULT_*). */
#define SBX_TAR_DEFAULT_MAX_ENTRY_BYTES (INT64_C(64) << 30)    /* 64 GiB */
#define SBX_TAR_DEFAULT_MAX_TOTAL_BYTES (INT64_C(256) << 30)   /* 256 GiB */
#define SBX_TAR_DEFAULT_MAX_ENTRIES INT64_C(1000000)

/** The caller's choices for sbx_tar_extract; every field 0 / NULL is the
 *  default. Sizes are apparent sizes (a sparse file counts whole). */
typedef struct sbx_tar_policy {
    int64_t max_entry_bytes;    /* largest file, bytes */
    int64_t max_total_bytes;    /* all files together, bytes */
    int64_t max_entries;        /* entries, the root "." not counted */
    int outside_symlinks;       /* SBX_TAR_SYMLINKS_* */
    /* Called for each entry left out (SKIP), on the extracting thread. */
    void (*note)(const char *entry, const char *message, void *user_data);
    void *note_data;
} sbx_tar_policy;

/** Who is calling: error construction, the call's deadline / cancel
 *  descriptor (ctx may be NULL: none), and the op named in errors. */
typedef struct sbx_fs_env {
    const sbx_host_services *hs;
    const sbx_call_ctx *ctx;
    const char *op;
} sbx_fs_env;

/* ---------------------------------------------------------------- paths */

/** sbx_fs_beneath flags. */
#define SBX_BENEATH_NO_SYMLINKS  1u  /* any symlink on the way is ELOOP */
#define SBX_BENEATH_CREATE_DIRS  2u  /* create missing directories (0755) */

/**
 * sbx_fs_open_beneath:
 * Opens @path (relative to @base; leading slashes are ignored, "" and "."
 * name @base itself) with open(2) @flags and @mode, resolving every
 * component beneath @base: ".." above @base, and a symlink that is
 * absolute or leads above @base, fail with EXDEV. Symlinks that stay
 * beneath are followed unless SBX_BENEATH_NO_SYMLINKS is set (then ELOOP);
 * the last component is never followed when @flags has O_NOFOLLOW. With
 * SBX_BENEATH_CREATE_DIRS missing directories before the last component
 * are created, and the last one too when @flags has O_DIRECTORY. Returns a descriptor (O_CLOEXEC) or -1 with errno set.
 * Thread-safe.
 */
int sbx_fs_open_beneath(int base, const char *path, unsigned how, int flags, mode_t mode);

/**
 * sbx_fs_parent_beneath:
 * Resolves every component of @path but the last, as sbx_fs_open_beneath,
 * and returns a descriptor of that directory; stores the last component
 * (a new string, never "." or "..") in *@last. When @path names @base or
 * ends in "." or "..", *@last is NULL and the descriptor is the directory
 * @path names. Returns -1 with errno set on failure.
 */
int sbx_fs_parent_beneath(int base, const char *path, unsigned how, char **last);

/**
 * sbx_fs_use_openat2:
 * 1 (the default) uses openat2() where the kernel has it; 0 makes every
 * resolution take the component walk, as on kernels without openat2 (for
 * tests). Process-wide.
 */
void sbx_fs_use_openat2(int on);

/**
 * sbx_fs_copy_fd:
 * Copies everything from @in_fd to @out_fd (to EOF; either may be a pipe,
 * a socket or a file, blocking or not) with a bounded buffer, using
 * copy_file_range / sendfile where the kernel can. Checks the deadline and
 * the cancel descriptor between chunks. @what names the data in errors.
 * Returns the number of bytes copied, or -1 with *@err set.
 */
int64_t sbx_fs_copy_fd(const sbx_fs_env *env, int in_fd, int out_fd, const char *what,
                       sbx_error **err);

/* ---------------------------------------------------------------- tar */

/**
 * sbx_tar_write_tree:
 * Writes the tree under directory @dir_fd (not itself) to @out_fd as a PAX
 * tar stream (ustar headers, PAX extended headers where needed: long names
 * and link targets, large sizes): regular files with their content,
 * directories (empty ones too) and symlinks as symlinks, entries relative
 * and sorted by name, with permission bits (0777) and mtime; owner 0.
 * Sockets, fifos and devices are skipped. Symlinks are never followed.
 * Files are opened without blocking and must be the regular file that was
 * stat'ed (same device, inode and type): one swapped meanwhile for a fifo,
 * a device, a symlink or another file is skipped too, so a tree that
 * changes while it is read (a sandbox's) can never hang the writer.
 * Returns the number of entries written, or -1 with *@err set.
 */
int64_t sbx_tar_write_tree(const sbx_fs_env *env, int dir_fd, int out_fd, sbx_error **err);

/**
 * sbx_tar_extract:
 * The checked extractor. Reads a tar stream (ustar, PAX or GNU; not
 * compressed) from @in_fd and extracts it into the directory @name of
 * @parent_fd (created when missing; entries merge into an existing one;
 * @name NULL: @parent_fd itself). Each entry is checked as it is read:
 * absolute paths, ".." components, hard links to anything but an earlier
 * entry, devices, fifos and sockets are refused with a workspace error
 * naming the entry (context "entry"); so is an entry that would be
 * written through a symlink, and one past a bound of the policy (a file
 * over max_entry_bytes, files adding up to over max_total_bytes, more than
 * max_entries entries; the message names the limit). A symlink whose
 * target is absolute or leaves the destination (leading ".." beyond the
 * link's depth, or a ".." after a name) is kept as it is, skipped with a
 * note, or refused, as the policy says; the extractor never follows one.
 * Entries go into a staging directory made beside the destination (inside
 * it when that is another filesystem), which is renamed or merged into
 * place once the whole stream was accepted and removed otherwise: a
 * refused stream leaves the destination as it was. Modes are the entry's
 * 0777 bits less this process's umask, runs of zeros are left as holes,
 * and the rest of the input is read to EOF. Returns the number of entries
 * made (the root "." and skipped entries not counted), or -1 with *@err
 * set.
 */
int64_t sbx_tar_extract(const sbx_fs_env *env, int in_fd, int parent_fd, const char *name,
                        sbx_error **err);
/** sbx_tar_extract() with the caller's @policy (borrowed; NULL: the
 *  defaults, as sbx_tar_extract). */
int64_t sbx_tar_extract_with(const sbx_fs_env *env, const sbx_tar_policy *policy, int in_fd,
                             int parent_fd, const char *name, sbx_error **err);

/* ---------------------------------------------------------------- one entry */

/**
 * sbx_tar_entry_header:
 * The header blocks of one tar entry, for a writer that streams the data
 * itself: ustar, with a PAX extended header where needed (long names, sizes
 * over 8 GiB, names that are not ASCII). @name is bytes, written as they
 * are whatever the process's locale (PAX hdrcharset=BINARY where it is not
 * ASCII); @type S_IFREG (of @size bytes) or S_IFDIR; @mode's 07777 bits;
 * @mtime in UNIX seconds; owner 0. Stores a new buffer (free()) of *@len
 * bytes, a multiple of 512, in *@out. The caller follows it with the data,
 * padding to 512 and, to end the stream, two zero blocks. Returns 0, or -1
 * with *@err set (workspace, resource_exhausted). Thread-safe.
 */
int sbx_tar_entry_header(const sbx_fs_env *env, const char *name, mode_t type, uint32_t mode,
                         int64_t size, int64_t mtime, unsigned char **out, size_t *len,
                         sbx_error **err);

/**
 * sbx_tar_first_file:
 * Reads a tar stream from @in_fd (any kind of descriptor; read to the end
 * of the first entry only) and writes the data of its first entry, which
 * must be a regular file, to @out_fd (holes as zeros). Entry names are
 * never translated: a name the locale cannot represent is no error.
 * @shown names the file in errors; @read_code is the code of a stream that
 * breaks off (connection when it comes from a provider). Returns 1 when
 * the file was copied, 0 when the stream holds no entry (no error set: the
 * caller knows why, e.g. an HTTP status), -1 with *@err set:
 * invalid_argument (not a regular file, context "path"), @read_code,
 * workspace (writing @out_fd failed). Thread-safe.
 */
int sbx_tar_first_file(const sbx_fs_env *env, int in_fd, int out_fd, const char *shown,
                       sbx_error_code read_code, sbx_error **err);

#ifdef SBX_ARCHIVE_TEST_HOOKS
/** Tests only (built with -DSBX_ARCHIVE_TEST_HOOKS): called by the tree
 *  writer between the stat and the open of each regular file @name in
 *  directory @dir_fd, so a test can swap it deterministically. */
extern void (*sbx_tar_test_before_open)(int dir_fd, const char *name);
#endif

#endif /* SBX_HOST_ARCHIVE_H */
