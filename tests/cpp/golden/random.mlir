// aten::uniform_
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<4xf32>, %1: tensor<2xui64>) -> (tensor<4xf32>) {
    %2:2 = "stablehlo.rng_bit_generator"(%1) {rng_algorithm = #stablehlo<rng_algorithm PHILOX>} : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>)
    %3 = "stablehlo.constant"() {value = dense<9> : tensor<ui32>} : () -> tensor<ui32>
    %4 = "stablehlo.broadcast_in_dim"(%3) {broadcast_dimensions = array<i64>} : (tensor<ui32>) -> tensor<4xui32>
    %5 = "stablehlo.shift_right_logical"(%2#1, %4) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %6 = "stablehlo.constant"() {value = dense<1065353216> : tensor<ui32>} : () -> tensor<ui32>
    %7 = "stablehlo.broadcast_in_dim"(%6) {broadcast_dimensions = array<i64>} : (tensor<ui32>) -> tensor<4xui32>
    %8 = "stablehlo.or"(%5, %7) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %9 = "stablehlo.bitcast_convert"(%8) : (tensor<4xui32>) -> tensor<4xf32>
    %10 = "stablehlo.constant"() {value = dense<1.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %11 = "stablehlo.broadcast_in_dim"(%10) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %12 = "stablehlo.subtract"(%9, %11) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %13 = "stablehlo.constant"() {value = dense<0.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %14 = "stablehlo.broadcast_in_dim"(%13) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %15 = "stablehlo.constant"() {value = dense<1.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %16 = "stablehlo.broadcast_in_dim"(%15) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %17 = "stablehlo.multiply"(%12, %16) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %18 = "stablehlo.add"(%17, %14) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%18) : (tensor<4xf32>) -> ()
  }
}
