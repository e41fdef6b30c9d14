/* The window job of job_window.c split in two for jobs that run it over
 * many images (job_cases.c): the job made once (options checked, models
 * kept; the engines built on the first image and kept for the next while
 * the window's input dims stay the same), then one run per image, over a
 * volume the caller has read already (so that it can read the next one
 * while this one runs). segrt_window_job_run is one create, one run of a
 * file and one free. */
#ifndef SG_PIPELINE_JOB_WINDOW_H
#define SG_PIPELINE_JOB_WINDOW_H

#include "core/file.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/source.h"
#include "segrt.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sg_window_job sg_window_job;

/* The options and models checked (as segrt_window_job_run checks them);
 * nothing is built yet. o, models and model_paths must outlive the job. */
sg_status sg_window_job_create(const segrt_window_job_options *o, segrt_model *const *models,
                               const char *const *model_paths, size_t n_models, sg_window_job **out);

/* A NIfTI file or DICOM series read whole as the job reads it (o's
 * series_uid and allow_uneven; a reader's notice, such as a series
 * resampled to even spacing, through o->notice): float32 1 x C x [D x] H x
 * W of its values (image->data malloc'd, the caller's), and where it lies
 * (where->format NULL). Thread-safe where o->notice is: touches no job. */
sg_status sg_window_job_read_volume(const segrt_window_job_options *o, const char *path, sg_tensor *image,
                                    sg_source_info *where);

/* What a run over a volume is told beyond the volume, and tells back. */
typedef struct sg_window_run_more {
    /* Host bytes the caller holds meanwhile (the next volume read ahead),
     * counted in the host-memory check. */
    uint64_t held_elsewhere;
    /* Called once the host-memory check passed, before the windows run
     * (the caller may then let its next read go on); NULL: none. */
    void (*checked)(void *user);
    void *checked_user;
    bool memory_refused;  /* out: the host-memory check refused the run; the volume is left to the caller */
    double seconds_write; /* out: writing the result into the output */
} sg_window_run_more;

/* One run of the job over a volume read already (image and where as
 * sg_window_job_read_volume gives them), named `name` in messages
 * (its file), its result written into `result` (the caller's to commit or
 * discard). image->data is taken (the job frees it) unless
 * more->memory_refused, where it is left to the caller for another try.
 * The engines are built when this volume's window input dims differ from
 * the last run's. report as segrt_window_job_run's; more may be NULL. */
sg_status sg_window_job_run_volume(sg_window_job *j, const char *name, sg_tensor *image, const sg_source_info *where,
                                   sg_output *result, segrt_window_job_report *report, sg_window_run_more *more);

/* One run of the job over a file it reads itself (a whole slide, or any
 * image segrt_window_job_run takes), its result written into `result`
 * (the caller's to commit or discard); the engines kept as run_volume
 * keeps them. report as segrt_window_job_run's; *seconds_write (may be
 * NULL): writing the result. */
sg_status sg_window_job_run_file(sg_window_job *j, const char *path, sg_output *result,
                                 segrt_window_job_report *report, double *seconds_write);

/* Engines, contexts and anything a run left; NULL is a no-op. */
void sg_window_job_free(sg_window_job *j);

#endif
