/*
 * local.h — what the parts of libsbx-local.so share (local.c: lifecycle
 * and exec; files.c: the file slots).
 */
#ifndef SBX_LOCAL_H
#define SBX_LOCAL_H

#include <sbx/plugin.h>

#include <pthread.h>
#include <sys/types.h>

/** A local sandbox: a root directory plus its supervisor process. */
struct sbx_plugin_sandbox {
    char *id;                   /* basename of meta */
    char *meta;                 /* meta directory */
    char *root;                 /* SANDBOX_ROOT */
    char *sock;                 /* meta/sock */
    char *tmp;                  /* root/tmp */
    pid_t sup_pid;
    unsigned long long sup_start;
    int owns_root;              /* root is meta/root */
    int made_tmp;               /* root/tmp was created by create */
    pthread_mutex_t lock;       /* guards destroyed; serialises destroy */
    int destroyed;
};

/** files.c: keeps the host services (called from the plugin's setup). */
void local_files_setup(const sbx_host_services *services);

/* files.c: the file slots (sbx_plugin in <sbx/plugin.h> documents them). */
int local_list_files(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                     const char *path, sbx_plugin_file_fn fn, void *user_data,
                     sbx_error **error);
int local_read_file(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                    const char *path, int fd, sbx_error **error);
int local_write_file(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                     const char *path, int fd, uint32_t mode, sbx_error **error);
int local_upload_tar(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                     const char *path, int fd, sbx_error **error);
int local_download_tar(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                       const char *path, int fd, sbx_error **error);
int local_stat_file(sbx_plugin_sandbox *sandbox, const sbx_call_ctx *ctx,
                    const char *path, sbx_plugin_file_info *info, sbx_error **error);

#endif /* SBX_LOCAL_H */
