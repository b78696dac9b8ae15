/* A small XBraid program (written for braidpy's tests, not part of XBraid) for Richardson
 * extrapolation and error estimates (braid_SetRichardsonEstimation) on XBraid's ex-01
 * problem: u' = -u, u(0) = 1, guess 0.456, backward Euler u <- 1/(1 + dt) u, norm
 * sqrt(u*u), [0, 5] (ex-01.c's problem and constants, as parity_driver.c).
 *
 * Build (XBraid built in XBRAID):
 *   mpicc -O2 -I$XBRAID/braid richardson_driver.c -o richardson_driver $XBRAID/braid/libbraid.a -lm
 * Options: -nt N  -ml L  -mc M  -cf C  -nu NU  -mi I  -tol T  -skip 0|1  -fmg
 *          -rich (Richardson extrapolation)  -est (error estimates)  -order K (local order)
 *          -res (a user residual, as parity_driver.c's)  -sc (parity_driver.c's spatial
 *          coarsening: coarsen 0.75 u, refine a copy)
 * Prints XBraid's own `|| r_k ||` lines (print level 1), "iterations K" and
 * "final u(T) = %.17e" (owner of t_N). Each rank R writes est_R.txt: for every level-0
 * step of one fine interval "step ITER I EST" (I: the index of tstop; EST from
 * GetSingleErrorEstStep, lines with -1 left out), for every sync at the top of a cycle
 * "sync ITER SUM N" (SUM: the local estimates of GetAllErrorEst added in order, N their
 * count) and for every point of the final access "final I EST" (GetSingleErrorEstAccess).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid.h"

typedef struct _braid_App_struct {
  int rank;
  int ntime;
  FILE *out;
  double final;
  int has_final;
} my_App;

typedef struct _braid_Vector_struct {
  double value;
} my_Vector;

static int my_Step(braid_App app, braid_Vector ustop, braid_Vector fstop, braid_Vector u,
                   braid_StepStatus status) {
  double tstart, tstop, est;
  int level, iter, idx;
  braid_StepStatusGetTstartTstop(status, &tstart, &tstop);
  braid_StepStatusGetLevel(status, &level);
  braid_StepStatusGetIter(status, &iter);
  braid_StepStatusGetTIndex(status, &idx);
  if (level == 0 && fabs((tstop - tstart) - 5.0 / app->ntime) < 1e-12) {
    braid_StepStatusGetSingleErrorEstStep(status, &est);
    if (est != -1.0) fprintf(app->out, "step %d %d %.17e\n", iter, idx + 1, est);
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
  double est;
  braid_AccessStatusGetTIndex(astatus, &index);
  braid_AccessStatusGetDone(astatus, &done);
  if (!done) return 0;
  braid_AccessStatusGetSingleErrorEstAccess(astatus, &est);
  fprintf(app->out, "final %d %.17e\n", index, est);
  if (index == app->ntime) {
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
  int caller, iter, n, k;
  double *est, sum = 0.0;
  braid_SyncStatusGetCallingFunction(status, &caller);
  braid_SyncStatusGetIter(status, &iter);
  if (caller != braid_ASCaller_Drive_TopCycle) return 0;
  braid_SyncStatusGetNumErrorEst(status, &n);
  est = malloc(sizeof(double) * (n > 0 ? n : 1));
  braid_SyncStatusGetAllErrorEst(status, est);
  for (k = 0; k < n; k++) sum += est[k];
  fprintf(app->out, "sync %d %.17e %d\n", iter, sum, n);
  free(est);
  return 0;
}

int main(int argc, char *argv[]) {
  braid_Core core;
  my_App app;
  int ntime = 10, max_levels = 2, min_coarse = 2, cfactor = 2, nrelax = 1, max_iter = 100;
  int skip = 1, fmg = 0, res = 0, sc = 0, rich = 0, est = 0, order = 2, arg, niter;
  double tol = 1.0e-6;
  char name[64];

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
    else if (!strcmp(argv[arg], "-order")) order = atoi(argv[++arg]);
    else if (!strcmp(argv[arg], "-fmg")) fmg = 1;
    else if (!strcmp(argv[arg], "-rich")) rich = 1;
    else if (!strcmp(argv[arg], "-est")) est = 1;
    else if (!strcmp(argv[arg], "-res")) res = 1;
    else if (!strcmp(argv[arg], "-sc")) sc = 1;
    else {
      if (app.rank == 0) fprintf(stderr, "unknown option %s\n", argv[arg]);
      MPI_Finalize();
      return 1;
    }
  }
  app.ntime = ntime;
  app.has_final = 0;
  sprintf(name, "est_%d.txt", app.rank);
  app.out = fopen(name, "w");

  braid_Init(MPI_COMM_WORLD, MPI_COMM_WORLD, 0.0, 5.0, ntime, &app, my_Step, my_Init, my_Clone,
             my_Free, my_Sum, my_SpatialNorm, my_Access, my_BufSize, my_BufPack, my_BufUnpack,
             &core);
  braid_SetPrintLevel(core, 1);
  braid_SetMaxLevels(core, max_levels);
  braid_SetMinCoarse(core, min_coarse);
  braid_SetCFactor(core, -1, cfactor);
  braid_SetNRelax(core, -1, nrelax);
  braid_SetMaxIter(core, max_iter);
  braid_SetAbsTol(core, tol);
  braid_SetSkip(core, skip);
  if (fmg) braid_SetFMG(core);
  if (res) braid_SetResidual(core, my_Residual);
  if (sc) {
    braid_SetSpatialCoarsen(core, my_Coarsen);
    braid_SetSpatialRefine(core, my_Refine);
  }
  braid_SetSync(core, my_Sync);
  braid_SetRichardsonEstimation(core, est, rich, order);

  braid_Drive(core);
  braid_GetNumIter(core, &niter);
  if (app.rank == 0) printf("iterations %d\n", niter);
  if (app.has_final) printf("final u(T) = %.17e\n", app.final);
  fflush(stdout);
  braid_Destroy(core);
  fclose(app.out);
  MPI_Finalize();
  return 0;
}
