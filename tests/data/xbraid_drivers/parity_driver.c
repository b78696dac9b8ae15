/* A small XBraid program (written for braidpy's tests, not part of XBraid) that exposes
 * the XBraid settings no shipped example takes on its command line, on XBraid's ex-01
 * problem: u' = -u, u(0) = 1, guess 0.456, backward Euler u <- 1/(1 + dt) u, norm
 * sqrt(u*u), [0, 5] (ex-01.c's problem and constants).
 *
 * Build (XBraid built in XBRAID):
 *   mpicc -O2 -I$XBRAID/braid parity_driver.c -o parity_driver $XBRAID/braid/libbraid.a -lm
 * Options: -nt N  -ml L  -mc M  -cf C  -nu NU  -mi I  -tol T  -skip 0|1  -fmg  -nfmg K
 *          -CWt W (all levels)  -CWtl LEVEL W (one level)  -rcg (relax_only_cg)
 *          -sync (print every sync call on every rank)  -periodic
 *          -res (a user residual, ex-01-expanded's: the step adds fstop before its solve,
 *          r <- (1 + dt) ustop - r)
 *          -fullres (braid_SetFullRNormRes with the -res residual: the full residual norm)
 *          -sc (spatial coarsening of the scalar: coarsen 0.75 u, refine a copy; the
 *          refine is not coarsen's inverse, so every coarse correction is damped)
 *          -access3 (access level 3: each rank R writes one line per access call to
 *          access_R.txt: "access caller C iter K level L index I done D t T rnorm R u V",
 *          C from GetCallingFunction, R from GetResidual, T, R and V as %.17e)
 *          -print3 (print level 3: XBraid's "Braid:  time step: ..., rnorm: ..." lines)
 *          -steps (each rank R writes one line per step call to steps_R.txt from the step
 *          status: "step caller C iter K level L index I ntpoints N done D tstart T0
 *          tstop T1", T0 and T1 as %.17e)
 * Prints XBraid's own `|| r_k ||` lines (print level 1); each rank R writes one line per
 * sync call to the file sync_R.txt in the current folder:
 * "sync rank R caller C iter K level L nlevels N done D ntime T lo I hi J rnorms ..."
 * (C = 7 after initialisation, 5 at the top of a cycle; rnorms from braid_StatusGetRNorms
 * on the sync status, the first K+1 entries, -1 where none was computed), and at the end
 * "iterations K" and "final u(T) = %.17e" from the rank that owns t_N (periodic: the
 * value at index 0, which is u(T) as well).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid.h"

typedef struct _braid_App_struct {
  int rank;
  int ntime;
  int periodic;
  FILE *syncs;
  FILE *accesses;
  FILE *steps;
  double final;
  int has_final;
} my_App;

typedef struct _braid_Vector_struct {
  double value;
} my_Vector;

static int my_Step(braid_App app, braid_Vector ustop, braid_Vector fstop, braid_Vector u,
                   braid_StepStatus status) {
  double tstart, tstop;
  braid_StepStatusGetTstartTstop(status, &tstart, &tstop);
  if (app->steps != NULL) {
    int caller, iter, level, index, ntpoints, done;
    braid_StepStatusGetCallingFunction(status, &caller);
    braid_StepStatusGetIter(status, &iter);
    braid_StepStatusGetLevel(status, &level);
    braid_StepStatusGetTIndex(status, &index);
    braid_StepStatusGetNTPoints(status, &ntpoints);
    braid_StepStatusGetDone(status, &done);
    fprintf(app->steps,
            "step caller %d iter %d level %d index %d ntpoints %d done %d tstart %.17e "
            "tstop %.17e\n", caller, iter, level, index, ntpoints, done, tstart, tstop);
  }
  if (fstop != NULL) u->value += fstop->value;
  u->value = 1. / (1. + tstop - tstart) * (u->value);
  return 0;
}

static int my_Residual(braid_App app, braid_Vector ustop, braid_Vector r,
                       braid_StepStatus status) {
  double tstart, tstop;
  braid_StepStatusGetTstartTstop(status, &tstart, &tstop);
  r->value = (1. + tstop - tstart) * (ustop->value) - (r->value);
  return 0;
}

static int my_Coarsen(braid_App app, braid_Vector fu, braid_Vector *cu_ptr,
                      braid_CoarsenRefStatus status) {
  my_Vector *cu = malloc(sizeof(my_Vector));
  cu->value = 0.75 * fu->value;
  *cu_ptr = cu;
  return 0;
}

static int my_Refine(braid_App app, braid_Vector cu, braid_Vector *fu_ptr,
                     braid_CoarsenRefStatus status) {
  my_Vector *fu = malloc(sizeof(my_Vector));
  fu->value = cu->value;
  *fu_ptr = fu;
  return 0;
}

static int my_Init(braid_App app, double t, braid_Vector *u_ptr) {
  my_Vector *u = malloc(sizeof(my_Vector));
  u->value = (t == 0.0) ? 1.0 : 0.456;
  *u_ptr = u;
  return 0;
}

static int my_Clone(braid_App app, braid_Vector u, braid_Vector *v_ptr) {
  my_Vector *v = malloc(sizeof(my_Vector));
  v->value = u->value;
  *v_ptr = v;
  return 0;
}

static int my_Free(braid_App app, braid_Vector u) {
  free(u);
  return 0;
}

static int my_Sum(braid_App app, double alpha, braid_Vector x, double beta, braid_Vector y) {
  y->value = alpha * (x->value) + beta * (y->value);
  return 0;
}

static int my_SpatialNorm(braid_App app, braid_Vector u, double *norm_ptr) {
  *norm_ptr = sqrt((u->value) * (u->value));
  return 0;
}

static int my_Access(braid_App app, braid_Vector u, braid_AccessStatus astatus) {
  int index, done;
  braid_AccessStatusGetTIndex(astatus, &index);
  braid_AccessStatusGetDone(astatus, &done);
  if (app->accesses != NULL) {
    int caller, iter, level;
    double t, rnorm;
    braid_AccessStatusGetCallingFunction(astatus, &caller);
    braid_AccessStatusGetIter(astatus, &iter);
    braid_AccessStatusGetLevel(astatus, &level);
    braid_AccessStatusGetT(astatus, &t);
    braid_AccessStatusGetResidual(astatus, &rnorm);
    fprintf(app->accesses,
            "access caller %d iter %d level %d index %d done %d t %.17e rnorm %.17e u %.17e\n",
            caller, iter, level, index, done, t, rnorm, u->value);
  }
  /* Periodic: index ntime does not exist; u(T) is u at index 0. */
  if (done && index == (app->periodic ? 0 : app->ntime)) {
    app->final = u->value;
    app->has_final = 1;
  }
  return 0;
}

static int my_BufSize(braid_App app, int *size_ptr, braid_BufferStatus bstatus) {
  *size_ptr = sizeof(double);
  return 0;
}

static int my_BufPack(braid_App app, braid_Vector u, void *buffer, braid_BufferStatus bstatus) {
  ((double *)buffer)[0] = u->value;
  braid_BufferStatusSetSize(bstatus, sizeof(double));
  return 0;
}

static int my_BufUnpack(braid_App app, void *buffer, braid_Vector *u_ptr,
                        braid_BufferStatus bstatus) {
  my_Vector *u = malloc(sizeof(my_Vector));
  u->value = ((double *)buffer)[0];
  *u_ptr = u;
  return 0;
}

static int my_Sync(braid_App app, braid_SyncStatus status) {
  int caller, iter, level, nlevels, done, ntime, lo, hi, k, n;
  double rnorms[1024];
  braid_SyncStatusGetCallingFunction(status, &caller);
  braid_SyncStatusGetIter(status, &iter);
  braid_SyncStatusGetLevel(status, &level);
  braid_SyncStatusGetNLevels(status, &nlevels);
  braid_SyncStatusGetDone(status, &done);
  braid_SyncStatusGetNTPoints(status, &ntime);
  braid_SyncStatusGetTIUL(status, &hi, &lo, 0);
  /* The sync status is the core, as every status: GetRNorms reads its history. */
  n = iter + 1;
  braid_StatusGetRNorms((braid_Status)status, &n, rnorms);
  fprintf(app->syncs,
          "sync rank %d caller %d iter %d level %d nlevels %d done %d ntime %d lo %d hi %d rnorms",
          app->rank, caller, iter, level, nlevels, done, ntime, lo, hi);
  for (k = 0; k < n; k++) fprintf(app->syncs, " %.17e", rnorms[k]);
  fprintf(app->syncs, "\n");
  return 0;
}

int main(int argc, char *argv[]) {
  braid_Core core;
  my_App app;
  int ntime = 10, max_levels = 2, min_coarse = 2, cfactor = 2, nrelax = 1, max_iter = 100;
  int skip = 1, fmg = 0, nfmg = -1, set_nfmg = 0, rcg = 0, sync = 0, periodic = 0, res = 0, sc = 0, fullres = 0, arg, niter;
  int access3 = 0, print3 = 0, steps = 0;
  int nlevel_wts = 0, wt_levels[16];
  double tol = 1.0e-6, cwt = 1.0, wts[16];

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &app.rank);
  for (arg = 1; arg < argc; arg++) {
    if (!strcmp(argv[arg], "-nt")) ntime = atoi(argv[++arg]);
    else if (!strcmp(argv[arg], "-ml")) max_levels = atoi(argv[++arg]);
    else if (!strcmp(argv[arg], "-mc")) min_coarse = atoi(argv[++arg]);
    else if (!strcmp(argv[arg], "-cf")) cfactor = atoi(argv[++arg]);
    else if (!strcmp(argv[arg], "-nu")) nrelax = atoi(argv[++arg]);
    else if (!strcmp(argv[arg], "-mi")) max_iter = atoi(argv[++arg]);
    else if (!strcmp(argv[arg], "-tol")) tol = atof(argv[++arg]);
    else if (!strcmp(argv[arg], "-skip")) skip = atoi(argv[++arg]);
    else if (!strcmp(argv[arg], "-fmg")) fmg = 1;
    else if (!strcmp(argv[arg], "-nfmg")) { nfmg = atoi(argv[++arg]); set_nfmg = 1; }
    else if (!strcmp(argv[arg], "-CWt")) cwt = atof(argv[++arg]);
    else if (!strcmp(argv[arg], "-CWtl")) {
      wt_levels[nlevel_wts] = atoi(argv[++arg]);
      wts[nlevel_wts++] = atof(argv[++arg]);
    }
    else if (!strcmp(argv[arg], "-rcg")) rcg = 1;
    else if (!strcmp(argv[arg], "-sync")) sync = 1;
    else if (!strcmp(argv[arg], "-periodic")) periodic = 1;
    else if (!strcmp(argv[arg], "-res")) res = 1;
    else if (!strcmp(argv[arg], "-sc")) sc = 1;
    else if (!strcmp(argv[arg], "-fullres")) fullres = 1;
    else if (!strcmp(argv[arg], "-access3")) access3 = 1;
    else if (!strcmp(argv[arg], "-print3")) print3 = 1;
    else if (!strcmp(argv[arg], "-steps")) steps = 1;
    else {
      if (app.rank == 0) fprintf(stderr, "unknown option %s\n", argv[arg]);
      MPI_Finalize();
      return 1;
    }
  }
  app.ntime = ntime;
  app.periodic = periodic;
  app.has_final = 0;
  app.accesses = NULL;
  app.steps = NULL;
  if (steps) {
    char name[64];
    sprintf(name, "steps_%d.txt", app.rank);
    app.steps = fopen(name, "w");
  }

  braid_Init(MPI_COMM_WORLD, MPI_COMM_WORLD, 0.0, 5.0, ntime, &app, my_Step, my_Init, my_Clone,
             my_Free, my_Sum, my_SpatialNorm, my_Access, my_BufSize, my_BufPack, my_BufUnpack,
             &core);
  braid_SetPrintLevel(core, print3 ? 3 : 1);
  if (access3) {
    char name[64];
    sprintf(name, "access_%d.txt", app.rank);
    app.accesses = fopen(name, "w");
    braid_SetAccessLevel(core, 3);
  }
  braid_SetMaxLevels(core, max_levels);
  braid_SetMinCoarse(core, min_coarse);
  braid_SetCFactor(core, -1, cfactor);
  braid_SetNRelax(core, -1, nrelax);
  braid_SetMaxIter(core, max_iter);
  braid_SetAbsTol(core, tol);
  braid_SetSkip(core, skip);
  braid_SetCRelaxWt(core, -1, cwt);
  for (arg = 0; arg < nlevel_wts; arg++) braid_SetCRelaxWt(core, wt_levels[arg], wts[arg]);
  if (fmg) braid_SetFMG(core);
  if (set_nfmg) braid_SetNFMG(core, nfmg);
  if (rcg) braid_SetRelaxOnlyCG(core, 1);
  if (sync) {
    char name[64];
    sprintf(name, "sync_%d.txt", app.rank);
    app.syncs = fopen(name, "w");
    braid_SetSync(core, my_Sync);
  }
  if (periodic) braid_SetPeriodic(core, 1);
  if (res) braid_SetResidual(core, my_Residual);
  if (fullres) braid_SetFullRNormRes(core, my_Residual);
  if (sc) {
    braid_SetSpatialCoarsen(core, my_Coarsen);
    braid_SetSpatialRefine(core, my_Refine);
  }

  braid_Drive(core);
  braid_GetNumIter(core, &niter);
  if (app.rank == 0) printf("iterations %d\n", niter);
  if (app.has_final) printf("final u(T) = %.17e\n", app.final);
  fflush(stdout);
  braid_Destroy(core);
  if (sync) fclose(app.syncs);
  if (app.accesses != NULL) fclose(app.accesses);
  if (app.steps != NULL) fclose(app.steps);
  MPI_Finalize();
  return 0;
}
